"""What a round says: the report, comparisons, leaderboard placing, planning, the model judge, plots,
and the evidence they read (Amber's Jobs and Harbor job folders)."""
