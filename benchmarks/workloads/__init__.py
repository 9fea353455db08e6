"""Workloads: one module per workload (its data, per-sample work, rows and targets)."""
