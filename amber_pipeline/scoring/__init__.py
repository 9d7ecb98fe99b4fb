"""The scoring engine: per-Task means, cell scores with bootstrap intervals, paired comparisons, and their store."""
