"""Amber in the browser: the web app `amber serve` serves at / (behind sign-in) and `amber ui` serves on the embedded
default (as the local user), beside the Dagster UI at /ui.

Every page reads through the operations the API serves (`amber_pipeline.operations`), for the user who signed in and
in the Workspace the URL names, so a page sees exactly what the API would: another Workspace's Job reads as one that
does not exist. Text from Trials and users is shown inert: the templates escape everything they are given.
"""
