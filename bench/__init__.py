"""Benchmarks: each a module run from the repository folder, ``python -m bench.<name>``; they
start their own processes with the toolkit of ``tools.processes``, like the tests."""
