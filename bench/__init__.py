"""The benchmarks: one folder per concern, the helpers they share at the top.

Run one from the repository root as `python -m bench.<folder>.bench_<name>`, all of them with
`make bench` (run_all.py). bench/README.md gives each one's method and latest figure.
"""
