"""Benchmarks, run as commands (``python -m bench.<name>``), not as tests."""
