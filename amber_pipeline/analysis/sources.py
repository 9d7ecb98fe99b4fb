"""Where `TrialEvidence` comes from: an Amber Job, a Harbor job folder, or an imported folder.

Every analysis command takes one of the three (:func:`load`) and reads them
all the same way. A folder inside Amber's home is read only when it is the
acting Workspace's (`source_paths`); any other reads exactly like a folder
that does not exist.

- An Amber Job's evidence is its Trial rows (Reward, Errored, error type,
  tokens and cost are Amber's own) with what each Trial's folder adds
  (`trial_folders.trial_facts`). It is derived when read, never by the cell
  run, and kept per Trial file: `warehouse/evidence/<file id>/<stamp>.parquet`,
  whose stamp is the Trial file's size and modification time, so a file
  rewritten by a restarted cell run is derived again and nothing is derived
  twice. The `failure_causes` view reads the same files.
- A Harbor job folder is read whole each time (`trial_folders.py`).
- An imported folder is stored as one Parquet file per (Workspace, folder),
  so importing again replaces the file with the same rows; the
  `imported_trials` view shows them.

Stored evidence carries each attempt's outcome and, unless it passed, its
failure cause (`report.outcome`, `report.failure_cause`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from amber_pipeline.analysis import source_paths
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.memo import Memo
from amber_pipeline.analysis.report import failure_cause, outcome
from amber_pipeline.analysis.trial_folders import (
    HARBOR_PREFIX,
    NO_FOLDER,
    NoHarborFolder,
    job_folder,
    read_harbor_folder,
    trial_facts,
)
from amber_pipeline.cells import NO_MODEL
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.jobs import outcomes, records
from amber_pipeline.warehouse import schemas
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord
from amber_pipeline.warehouse.storage import StoredFile

if TYPE_CHECKING:
    import pyarrow as pa

FIELDS = [f.name for f in dataclasses.fields(TrialEvidence)]
EVIDENCE: Memo[list[TrialEvidence]] = Memo(16)  # an unchanged Job's evidence, read once per process


class NoTrials(AmberError):
    """A source with no finished Trial."""

    def __init__(self, what: str):
        super().__init__(f"{what} has no Trials: run it first, or pick a source with finished Trials "
                         "(a trial folder with result.json).")


def is_amber_job(source: str) -> bool:
    """A source that names an Amber Job (job-...), not a folder that happens to be called so."""
    return source.startswith("job-") and not Path(source).exists()


def load(wh: Warehouse, workspace: str, source: str, version: JobVersion | None = None) -> list[TrialEvidence]:
    """The evidence of an Amber Job id, a Harbor job folder path, or "harbor:<name>" of an imported folder
    (``version``: the Job's, when the caller has listed it)."""
    if source.startswith(HARBOR_PREFIX):
        return _imported(wh, workspace, source)
    if is_amber_job(source):
        evidence = amber_job(wh, workspace, source, version)
        if not evidence:
            raise NoTrials(f"Job {source}")
        return evidence
    if Path(source).expanduser().is_dir() and source_paths.readable_folder(wh, workspace, source):
        evidence = read_harbor_folder(Path(source))
        if not evidence:
            raise NoTrials(f"Harbor job folder {source}")
        return evidence
    raise AmberError(f"Unknown source {source!r}: give an Amber Job id (job-...), a Harbor job folder path, "
                     "or harbor:<name> of a folder imported with `amber import-harbor DIR`.")


# ---- Amber Jobs: derived when read ----------------------------------------------------------------------

def amber_job(wh: Warehouse, workspace: str, job_id: str, version: JobVersion | None = None) -> list[TrialEvidence]:
    """A Job's Trials that are results (not cancelled), each with what its folder adds; another Workspace's Job
    reads as one that does not exist (`records.get_job`)."""
    records.get_job(wh, job_id, workspace)
    version = version or job_version(wh, workspace, job_id)

    def read() -> list[TrialEvidence]:
        rows = [row for stored in version.files
                for row in _rows(wh, derive(wh, stored.path, stored)) if row["workspace"] == workspace]
        evidence = [TrialEvidence(**{k: row[k] for k in FIELDS}) for row in rows]
        return sorted(evidence, key=lambda e: (e.route, e.task_name, e.attempt))

    return list(EVIDENCE.get(version, read))  # a copy: callers may sort it


class JobVersion(NamedTuple):
    """A Job's stored Trial files, one per cell, with their sizes and times, for one Workspace's view of it: what
    its evidence is made from, so the key of anything computed from its Trials (`memo.py`). Listed once per
    request and handed on, so a page lists the files once."""

    home: Path
    workspace: str
    job_id: str
    files: tuple[StoredFile, ...]


def job_version(wh: Warehouse, workspace: str, job_id: str) -> JobVersion:
    files = tuple(sorted(wh.store.files(wh.paths.trials, f"*/{job_id}.parquet"), key=lambda f: f.path))
    return JobVersion(wh.paths.home, workspace, job_id, files)


def derive(wh: Warehouse, trial_file: Path, listed: StoredFile | None = None) -> Path:
    """The evidence file of one stored Trial file (``listed``: its size and time, when the caller has them),
    derived now unless it is there for this version of the file.

    A Trial folder that is not on this machine is fetched from the result store first (`storage.py`); Trial
    rows name the folder where it was made, which is the same place below AMBER_HOME here.
    """
    if listed is None:
        st = trial_file.stat()
        listed = StoredFile(trial_file, st.st_size, st.st_mtime_ns)
    folder = wh.paths.evidence / hashlib.sha256(str(trial_file).encode()).hexdigest()[:24]
    stored = folder / f"{listed.size}-{listed.mtime_ns}.parquet"
    if wh.store.exists(stored):
        return stored
    records = [TrialRecord.model_validate(r) for r in _rows(wh, trial_file)]
    folders = [here(wh, r.trial_dir) for r in records]
    for cell_dir in {f.parent for f in folders if f is not None}:
        wh.store.fetch_folder(cell_dir)
    wh.write_parquet(_table([(r.workspace, Path(r.trial_dir).parent, _of_record(r, folder))
                             for r, folder in zip(records, folders, strict=True)
                             if r.outcome != outcomes.Kind.CANCELLED]), stored)
    for old in wh.store.files(folder, "*.parquet"):
        if old.path != stored:
            wh.store.remove(old.path)
    return stored


def _rows(wh: Warehouse, path: Path) -> list[dict]:
    table = wh.read_parquet(path)
    return [] if table is None else table.to_pylist()


def here(wh: Warehouse, trial_dir: str) -> Path | None:
    """Where a Trial folder is on this machine: as named, or at the same place below this AMBER_HOME
    (``runs/<job>/<cell>/<trial>``) when another machine with another home ran it; None for a static Trial, whose
    row names no folder (an empty path, which would name the current directory)."""
    if not trial_dir:
        return None
    path = Path(trial_dir)
    if not wh.store.remote or path.is_relative_to(wh.paths.runs) or path.exists() or len(path.parts) < 4:
        return path
    return wh.paths.runs.joinpath(*path.parts[-3:])


def refresh(wh: Warehouse) -> int:
    """Derive the evidence of every stored Trial file that has none yet (for the `failure_causes` view)."""
    files = wh.trial_files()
    for path, size, mtime_ns in files:
        derive(wh, path, StoredFile(path, size, mtime_ns))
    return len(files)


def _of_record(r: TrialRecord, folder: Path | None) -> TrialEvidence:
    """A Trial's evidence: its row, and what its folder adds; a static Trial has none (`here`), so nothing is
    looked for, where 1,000 of them looked for 3,000 files each time a static Job's results were first read."""
    facts = trial_facts(folder) if folder is not None else dict(NO_FOLDER)
    return TrialEvidence(
        source=r.job_id, trial_name=r.trial_name, task_name=r.task_name, agent=r.agent,
        model=None if r.model_configuration == NO_MODEL else r.model_configuration, attempt=r.attempt,
        reward=r.reward, errored=r.errored, exception_type=r.error_type, started_at=r.started_at,
        finished_at=r.finished_at, input_tokens=r.input_tokens, output_tokens=r.output_tokens,
        cost_usd=r.cost_usd, trial_dir=r.trial_dir, **facts)


def _table(evidence: Sequence[tuple[str, Path, TrialEvidence]]) -> pa.Table:
    """Evidence rows as stored, each with its Workspace, folder, outcome and (unless it passed) failure cause."""
    rows = [{"workspace": workspace, "folder": str(folder), **dataclasses.asdict(e), "outcome": outcome(e),
             "cause": None if e.passed else failure_cause(e)} for workspace, folder, e in evidence]
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=schemas.EVIDENCE_SCHEMA)


# ---- imported Harbor folders ------------------------------------------------------------------------------

def import_file(wh: Warehouse, workspace: str, folder: Path) -> Path:
    """The one Parquet file of a (Workspace, resolved folder)."""
    key = hashlib.sha256(f"{workspace}\0{folder}".encode()).hexdigest()[:16]
    return wh.paths.imports / f"{key}.parquet"


def import_harbor(wh: Warehouse, workspace: str, path: Path) -> tuple[str, int]:
    """Store a Harbor job folder's evidence for the Workspace; importing again changes nothing."""
    if not source_paths.readable_folder(wh, workspace, path):
        raise NoHarborFolder(path)
    folder = job_folder(path)
    evidence = read_harbor_folder(folder)
    if not evidence:
        raise NoTrials(f"Harbor job folder {folder}")
    wh.write_parquet(_table([(workspace, folder, e) for e in evidence]), import_file(wh, workspace, folder))
    return evidence[0].source, len(evidence)


def _imported(wh: Warehouse, workspace: str, source: str) -> list[TrialEvidence]:
    with wh.query(workspace, {"imported_trials"}) as con:
        rows = con.execute("select * from imported_trials where source = ? order by folder, agent, model, "
                           "task_name, attempt", [source]).fetch_arrow_table().to_pylist()
    folders = sorted({r["folder"] for r in rows})
    if not rows:
        raise NotFound(f"No imported Harbor folder {source} in Workspace {workspace}: "
                       "import it with `amber import-harbor DIR`, or give the folder's path.")
    if len(folders) > 1:
        raise AmberError(f"{source} names {len(folders)} imported folders ({', '.join(folders)}): "
                         "give the folder's path instead.")
    return [TrialEvidence(**{k: r[k] for k in FIELDS}) for r in rows]
