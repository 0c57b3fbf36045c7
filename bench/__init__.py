"""The benchmarks, run as modules from the repository's root (docs/bench.md): bench.run (make bench),
bench.overhead (make bench-overhead), bench.costs, bench.predict, bench.validate, bench.warmup and
bench.checkpoint_cost, with the traffic model (bench/traffic.py) they hold the runs against."""
