"""The benchmarks, run as modules from the repository's root (python -m bench.run); docs/bench.md explains them."""
