"""The benchmarks' scenarios, one module each, on the shared load and report helpers.

Each module holds one scenario's result record, the code that runs it and the lines it
adds to the summary; the entry points (``bench/embedded.py``, ``bench/cluster.py``,
``bench/iceberg.py``, ``bench/authz.py``) choose, run and report them.
"""
