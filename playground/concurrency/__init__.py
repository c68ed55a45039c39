"""Pure parts of the concurrency experiments (lecture section 3): interleavings and workloads."""
