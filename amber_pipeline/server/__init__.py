"""The hosted API: every operation of `amber_pipeline.api` as an HTTP route, behind sign-in with API tokens."""
