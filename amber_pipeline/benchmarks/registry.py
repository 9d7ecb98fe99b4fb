"""The catalog's Benchmark Versions: who owns each, its human label, and who may see it.

A Benchmark Version is owned by a Workspace (private) or by ``public``. A
private one is seen by its Workspace alone: listings, lookups by label or id
and their error messages all answer for another Workspace's Version exactly
as for one that does not exist.

Its label numbers the Versions of one name for one owner in registration
order (``name@N``), or is given by where the Tasks come from (Harbor's
registry: ``terminal-bench@2.0``); registering the same content again returns
the label it already has. An upload's Tasks are staged as an unpublished
Version while they are validated: jobs can run it, but no listing or lookup
by label finds it until it is published.

A folder's Tasks are read first and written nowhere (`versions.read_folder`);
their files and their row are kept together, the row in the same catalog
transaction that needs it (a Quote's reservation: `record_folder`), so a
refused command leaves neither.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from amber_pipeline.benchmarks.versions import BenchmarkVersion, FolderTasks, open_snapshot, read_folder
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.warehouse.catalog import Connection, Warehouse

PUBLIC = "public"
LABEL = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)@(?P<version>[A-Za-z0-9._+-]+)$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ID_PREFIX = re.compile(r"^[0-9a-f]{8,64}$")


@dataclass(frozen=True)
class Listed:
    """A Benchmark Version as a listing shows it."""

    id: str
    owner: str
    name: str
    label: str
    n_tasks: int
    origin: str  # folder, upload, registry or adapter
    created_at: datetime
    allowed_hosts: tuple[str, ...]

    @property
    def public(self) -> bool:
        return self.owner == PUBLIC


def is_label(ref: str) -> bool:
    """A reference that reads as a label ``name@N`` (or ``name@version``) and is not a folder on disk."""
    return LABEL.match(ref) is not None and not Path(ref).exists()


def check_name(name: str) -> str:
    """A Benchmark's name, or one sentence refusing it."""
    if not NAME.match(name):
        raise AmberError(f"{name!r} is not a Benchmark name: use up to 64 letters, digits, '.', '_' and '-', "
                         "starting with a letter or digit.")
    return name


def register(wh: Warehouse, source: Path, owner: str, *, name: str | None = None, label: str | None = None,
             origin: str = "folder", folders: Sequence[str] | None = None,
             allowed_hosts: Sequence[str] = ()) -> tuple[BenchmarkVersion, str]:
    """Snapshot Tasks for an owner (a Workspace, or public) as a published Version; a new one is labelled
    ``label``, else ``name@N``."""
    found = read_folder(source, wh.paths.benchmarks, name, folders=folders, allowed_hosts=allowed_hosts)
    with found.staged() as move_in, wh.write() as con:
        given = _record(con, found.version, owner, label=label, origin=origin, source=str(source.resolve()),
                        published=True)
        return move_in(), given


def stage(wh: Warehouse, source: Path, owner: str, name: str, handle: str, folders: Sequence[str],
          allowed_hosts: Sequence[str] = ()) -> BenchmarkVersion:
    """Snapshot an upload's Tasks as an unpublished Version of the Workspace, for its validation Job."""
    found = read_folder(source, wh.paths.benchmarks, name, folders=folders, allowed_hosts=allowed_hosts)
    with found.staged() as move_in, wh.write() as con:
        _record(con, found.version, owner, label=handle, origin="upload", source=None, published=False)
        return move_in()


def label_of(wh: Warehouse, folder: FolderTasks, owner: str) -> str:
    """The label a folder's Tasks have for the owner, or would get were they registered now; writes nothing."""
    with wh.read() as con:
        return _label(con, folder.version, owner, None, published=True)[0]


def record_folder(con: Connection, folder: FolderTasks, owner: str) -> str:
    """Record a folder's Tasks as a published Version of the owner inside the caller's catalog transaction (its
    files are moved in by the caller, `FolderTasks.staged`): its label, the existing one for the same Tasks."""
    return _record(con, folder.version, owner, label=None, origin="folder", source=str(folder.source), published=True)


def publish(con: Connection, version: BenchmarkVersion, owner: str) -> str:
    """Publish a snapshot of a Workspace's validated Tasks: its label (the existing one for the same Tasks)."""
    return _record(con, version, owner, label=None, origin="upload", source=None, published=True)


def _label(con: Connection, version: BenchmarkVersion, owner: str, label: str | None,
           published: bool) -> tuple[str, tuple | None, int]:
    """(label, the Version's row for the owner if it has one, its number): the row's label when it is already
    recorded as asked, else ``label`` or the next ``name@N``."""
    row = con.execute("select label, published from benchmark_versions where id = ? and owner = ?",
                      [version.id, owner]).fetchone()
    if row and (row[1] or not published):
        return row[0], row, 0
    number_row = con.execute("select coalesce(max(number), 0) + 1 from benchmark_versions "
                             "where name = ? and owner = ? and published", [version.name, owner]).fetchone()
    assert number_row is not None
    number = number_row[0] if published else 0
    return label or f"{version.name}@{number}", row, number


def _record(con: Connection, version: BenchmarkVersion, owner: str, *, label: str | None,
            origin: str, source: str | None, published: bool) -> str:
    label, row, number = _label(con, version, owner, label, published)
    if row and (row[1] or not published):
        return label
    taken = con.execute("select 1 from benchmark_versions where owner = ? and label = ?", [owner, label]).fetchone()
    if taken:
        raise AmberError(f"Benchmark Version {label} already exists with other Tasks: a label names one set of "
                         "Tasks for good, so give the new Tasks another version.")
    hosts = json.dumps(list(version.allowed_hosts)) if version.allowed_hosts else None
    if row:  # an upload's staged Tasks, now published
        con.execute("update benchmark_versions set published = true, number = ?, label = ?, created_at = now() "
                    "where id = ? and owner = ?", [number, label, version.id, owner])
    else:
        con.execute("insert into benchmark_versions (id, owner, name, number, label, source_path, n_tasks, "
                    "published, origin, allowed_hosts) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [version.id, owner, version.name, number, label, source, len(version.tasks), published, origin,
                     hosts])
    return label


_PUBLISHED = """select id, owner, name, label, n_tasks, coalesce(origin, 'folder'), created_at, allowed_hosts
                from benchmark_versions where coalesce(published, true)"""
_LISTED = f"{_PUBLISHED} and owner in (?, 'public')"


def _listed(row: tuple) -> Listed:
    id_, owner, name, label, n_tasks, origin, created_at, hosts = row
    return Listed(id_, owner, name, label, n_tasks, origin, created_at, tuple(json.loads(hosts)) if hosts else ())


def published(wh: Warehouse) -> list[Listed]:
    """Every published Version of every owner, oldest first: Amber's own view (the Dagster asset's)."""
    with wh.read() as con:
        return [_listed(r) for r in con.execute(f"{_PUBLISHED} order by created_at").fetchall()]


def visible(wh: Warehouse, workspace: str) -> list[Listed]:
    """Every published Version the Workspace sees: public ones and its own, by name then number."""
    with wh.read() as con:
        rows = con.execute(f"{_LISTED} order by owner = 'public' desc, name, created_at", [workspace]).fetchall()
    return [_listed(r) for r in rows]


def lookup(wh: Warehouse, ref: str, workspace: str) -> Listed:
    """A Version the Workspace sees, by label or by id (8 hex digits or more): its own first, then public."""
    with wh.read() as con:
        rows = con.execute(f"{_LISTED} and (label = ? or (? and starts_with(id, ?))) "
                           "order by owner = ? desc, created_at", [workspace, ref, bool(ID_PREFIX.match(ref)), ref,
                                                                   workspace]).fetchall()
    if not rows:
        raise NotFound(f"No Benchmark Version {ref} in Workspace {workspace}: list them with "
                       "`amber benchmark list`, or give a folder path.")
    return _listed(rows[0])


def find(wh: Warehouse, label: str, workspace: str) -> tuple[BenchmarkVersion, str, str]:
    """(version, owner, label) of a label the Workspace sees: its own first, then public ones."""
    found = lookup(wh, label, workspace)
    return (open_snapshot(found.id, found.name, wh.paths.benchmarks, found.allowed_hosts), found.owner,
            found.label)


def version(wh: Warehouse, version_id: str, owner: str) -> BenchmarkVersion:
    """A registered Benchmark Version (published or staged), reopened from its stored copy."""
    with wh.read() as con:
        row = con.execute("select name, allowed_hosts from benchmark_versions where id = ? and owner = ?",
                          [version_id, owner]).fetchone()
    if row is None:
        raise AmberError(f"No Benchmark Version {version_id[:12]} owned by {owner}: submit its folder again.")
    return open_snapshot(version_id, row[0], wh.paths.benchmarks, tuple(json.loads(row[1])) if row[1] else ())
