"""Intake: the two gates an uploaded archive passes before Amber keeps anything of it.

`archive` (with `archive_entries`, the tar and zip readers, and
`archive_refusals`) unpacks it under strict rules and limits; `checks` (with
`dockerfiles`, `compose` and `task_refusals`) checks each Task on its own.
Neither touches the catalog, so importing them stays light (`bench/upload_check.py`
times them in a fresh process).
"""
