"""Amber core library: everything but the Dagster layer. Never imports dagster."""
