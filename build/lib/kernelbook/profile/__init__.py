"""Nsight Compute and compute-sanitizer runs into rows, and the roofline table."""
