"""Dagster's migration scripts, read once per process.

Dagster's SQL storage checks each database it opens against its migration scripts (ninety for SQLite), which
Alembic reads anew from their folder for every check and stamp. A process opens such storage again and again:
a cell run opens the run's file and the index, and a code server makes an instance for every sensor evaluation
(three sensors ticking every 5-10 s, so an idle embedded Amber spent most of its code server's time reading
scripts). Read once, a folder's scripts serve the process for its whole life: they are the same files while it
runs (Alembic's objects for them are read-only once read; Dagster holds a lock around each use).
"""

from __future__ import annotations


def share() -> None:
    """From now on, each folder of migration scripts is read once in this process (and its forks), when first
    used. Sharing twice changes nothing."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    if getattr(ScriptDirectory.from_config, "_amber_shared", False):
        return
    read = ScriptDirectory.from_config.__func__  # type: ignore[attr-defined]
    known: dict[str, ScriptDirectory] = {}

    def from_config(cls: type[ScriptDirectory], config: Config) -> ScriptDirectory:
        location = config.get_main_option("script_location") or ""
        if location not in known:
            known[location] = read(cls, config)
        return known[location]

    from_config._amber_shared = True  # type: ignore[attr-defined]
    ScriptDirectory.from_config = classmethod(from_config)  # type: ignore[method-assign, assignment]


def read_sqlite_scripts() -> None:
    """Share, and read the SQLite storage's scripts now: a process about to fork reads them once for every
    child."""
    from alembic.script import ScriptDirectory
    from dagster._core.storage.event_log.sqlite import sqlite_event_log
    from dagster._core.storage.sql import get_alembic_config

    share()
    ScriptDirectory.from_config(get_alembic_config(sqlite_event_log.__file__)).as_revision_number("head")
