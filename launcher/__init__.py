"""How Amber's Dagster runs start: at once, in warm processes."""
