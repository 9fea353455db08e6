"""Test-only infrastructure: a SeaweedFS server, a fault-injecting proxy, a latency relay."""
