"""Benchmarks of measurement fidelity and speed. Run all with ``make bench`` (``python -m bench``)."""
