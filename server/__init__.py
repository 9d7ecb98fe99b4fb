"""The hosted Amber (`amber serve`, `python -m server`): every operation of `amber_pipeline.operations` as an HTTP route
behind sign-in with API tokens (`app.py`), and the Dagster UI mounted under it behind the same sign-in
(`dagster_ui.py`). One package, above the core, since the UI needs Dagster and the core never imports it."""
