"""Paths are not permissions: which places inside Amber's home a Workspace may name.

Analysis commands take folder and file paths (`amber report DIR`, `amber
import-harbor DIR`, `--plot FILE`, ...). Inside the instance (`AMBER_HOME`:
the warehouse, Benchmark snapshots, every Workspace's run folders) a path
names another Workspace's data as easily as one's own, so there the rule is
ownership, not the path: a place inside the home is the acting Workspace's
only when it lies in the run folder `runs/<job>/` of one of its own Jobs.
Paths are taken as the file system resolves them (`~`, `..` and symbolic
links followed), so a link from `/tmp` into the home counts as inside. A
Harbor job folder is also refused when a link among the files its reader
opens leads into the home outside the Workspace's own run folders, since the
reader follows links. The places of the home are checked one by one too, as
any of them may be a link to another disk. Everything outside the home is
the user's business, as before.

A refused place reads exactly like one that does not exist (the caller gives
its own missing-folder sentence; :class:`NoHarborFolder` is `amber
import-harbor`'s), so another Workspace's Jobs are never hinted at; a
refused write target gets :class:`NotYours`, the same for every place of the
home.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import records
from amber_pipeline.paths import resolved
from amber_pipeline.warehouse.catalog import Warehouse


class NotYours(AmberError):
    """A file would be written inside Amber's home, outside the Workspace's own run folders."""

    def __init__(self, path: Path | str):
        super().__init__(f"{path} is inside Amber's home, where files go only into your own Jobs' run folders: "
                         "give a path outside it.")


def permitted(wh: Warehouse, workspace: str, path: Path | str) -> bool:
    """Whether the Workspace may read or write at this path: anywhere outside Amber's home, and inside it only
    within the run folder of one of its own Jobs."""
    where = resolved(path)
    runs = resolved(wh.paths.runs)
    if where.is_relative_to(runs) and where != runs:
        return _owns_job(wh, workspace, where.relative_to(runs).parts[0])
    return not wh.paths.holds(where)


def readable_folder(wh: Warehouse, workspace: str, folder: Path | str) -> bool:
    """Whether the Workspace may read this Harbor job folder: it is :func:`permitted` and no link among what its
    reader opens (:func:`_opened`) leads to a place that is not."""
    return permitted(wh, workspace, folder) and not any(
        entry.is_symlink() and not permitted(wh, workspace, entry) for entry in _opened(resolved(folder)))


def writable(wh: Warehouse, workspace: str, path: Path | str) -> Path:
    """The path, when the Workspace may write there; else :class:`NotYours`."""
    if not permitted(wh, workspace, path):
        raise NotYours(path)
    return Path(path)


def _opened(folder: Path) -> Iterator[Path]:
    """What `trial_folders` opens in a Harbor job folder: its entries and, in each trial folder (one with
    result.json), two levels down (result.json, agent/trajectory.json, verifier/ctrf.json...). Bounded, so a
    folder such as `/` is not walked whole."""
    try:
        for trial in folder.iterdir():
            yield trial
            if trial.is_dir() and (trial / "result.json").is_file():
                for entry in trial.iterdir():
                    yield entry
                    if entry.is_dir():
                        yield from entry.iterdir()
    except OSError:
        return


def _owns_job(wh: Warehouse, workspace: str, job_id: str) -> bool:
    try:
        records.get_job(wh, job_id, workspace)
    except AmberError:
        return False
    return True
