"""The benchmarks, run as modules from the repository: `python -m bench.run` (make bench), `python -m
bench.predict`, `python -m bench.overhead` (make bench-overhead), `python -m bench.sparse_update`; the traffic
model (bench/traffic.py) and the bare loop (bench/bare_loop.py) that bench.overhead and bench.sparse_update
time run.py's graph against."""
