"""nvcc and Triton to a cubin and its build row (registers, shared memory, spills, SASS); no GPU."""
