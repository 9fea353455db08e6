"""Micro-benchmarks: small scripts that time one mechanism (run each with ``python -m``)."""
