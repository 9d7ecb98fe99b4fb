"""The hosted API's Dagster layer: the Dagster UI mounted under the API, behind its sign-in."""
