"""What a round says: the report, comparisons, leaderboard placing, planning, the model judge, plots,
and the evidence they read (Amber's Jobs and Harbor job folders).

Each result is a typed record (pydantic) defined beside the function that computes it: `report.RoundReport`,
`compare.RoundComparison`, `leaderboard.Placing`, `plan.Plan`, `judge.JudgeReport`. The API returns them as
they are, so its OpenAPI document describes every field; showing them is apart from computing them
(`render_report` for text, `plots` for pictures), and only the CLI and the Dagster UI do that."""
