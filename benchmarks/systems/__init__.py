"""Systems: one adapter module per loader under test, shared by every workload."""
