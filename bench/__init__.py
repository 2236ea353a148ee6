"""Benchmarks (``python -m bench.embedded``); not shipped in the wheel."""
