"""Benchmarks: each measures side by side in one run and appends its section to BENCHMARKS.md."""
