"""The catalog's Benchmark Versions: who owns each, and its human label ``name@N``.

A Benchmark Version is owned by a Workspace (private) or by ``public``. Its
label numbers the versions of one name for one owner in registration order;
registering the same content again returns the label it already has.
"""

from __future__ import annotations

import re
from pathlib import Path

from amber_pipeline.benchmarks.versions import BenchmarkVersion, open_snapshot, snapshot
from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse.catalog import Warehouse

PUBLIC = "public"
LABEL = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)@(?P<number>\d+)$")


def is_label(ref: str) -> bool:
    """A reference that reads as a label ``name@N`` and is not a folder on disk."""
    return LABEL.match(ref) is not None and not Path(ref).exists()


def register(wh: Warehouse, source: Path, owner: str) -> tuple[BenchmarkVersion, str]:
    """Snapshot a Benchmark folder for an owner (a Workspace, or public); a new version gets name@N."""
    version = snapshot(source, wh.paths.benchmarks)
    with wh.write() as con:
        row = con.execute("select label from benchmark_versions where id = ? and owner = ?",
                          [version.id, owner]).fetchone()
        if row:
            return version, row[0]
        number_row = con.execute("select coalesce(max(number), 0) + 1 from benchmark_versions "
                                 "where name = ? and owner = ?", [version.name, owner]).fetchone()
        assert number_row is not None
        label = f"{version.name}@{number_row[0]}"
        con.execute("insert into benchmark_versions (id, owner, name, number, label, source_path, n_tasks) "
                    "values (?, ?, ?, ?, ?, ?, ?)",
                    [version.id, owner, version.name, number_row[0], label, str(source.resolve()),
                     len(version.tasks)])
    return version, label


def find(wh: Warehouse, label: str, workspace: str) -> tuple[BenchmarkVersion, str, str]:
    """(version, owner, label) of a label the Workspace sees: its own first, then public ones."""
    with wh.read() as con:
        row = con.execute("""select id, owner, name, label from benchmark_versions
                             where label = ? and owner in (?, ?) order by owner = ? desc limit 1""",
                          [label, workspace, PUBLIC, workspace]).fetchone()
    if row is None:
        raise AmberError(f"No Benchmark Version {label} in Workspace {workspace}: list them with "
                         "`amber sql \"select label from benchmark_versions\"`, or give a folder path.")
    version_id, owner, name, found = row
    return open_snapshot(version_id, name, wh.paths.benchmarks), owner, found


def version(wh: Warehouse, version_id: str, owner: str) -> BenchmarkVersion:
    """A registered Benchmark Version, reopened from its stored copy."""
    with wh.read() as con:
        row = con.execute("select name from benchmark_versions where id = ? and owner = ?",
                          [version_id, owner]).fetchone()
    if row is None:
        raise AmberError(f"No Benchmark Version {version_id[:12]} owned by {owner}: submit its folder again.")
    return open_snapshot(version_id, row[0], wh.paths.benchmarks)
