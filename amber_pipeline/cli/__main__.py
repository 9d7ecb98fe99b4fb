"""`python -m amber_pipeline.cli`: the `amber` command."""

from amber_pipeline.cli.app import main

main()
