"""Tasks, Benchmark Versions (immutable content-addressed snapshots) and their labels in the catalog."""
