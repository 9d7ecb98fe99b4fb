"""The `amber` command line: one sub-app per area over a shared context object and output helper."""
