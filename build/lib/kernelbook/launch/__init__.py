"""The only way a variant is loaded and launched: in-process for the bench, as a process for
ncu and compute-sanitizer."""
