"""A cell's run folder as a Harbor job folder: the job-level config.json and result.json Harbor's viewer reads.

`harbor view FOLDER` lists each folder of FOLDER as a job, named by the folder, described by its config.json
(a `JobConfig`: Agent, model, dataset) and counted by its result.json (a `JobResult`: Trials in all, done and
errored); its trials are its subfolders with a config.json or result.json. Amber's Trial folders are Harbor's
own, and a cell's folder is named for the cell (`records.run_dir`), so with these two files `harbor view
$AMBER_HOME/runs/<job>` shows each cell of the Job as a job of its own with its Trial counts.

The files are written when the cell's run starts, after each Trial and when it ends; they describe the folder
for Harbor and nothing of Amber reads them (its readers take the Trial folders, those with a result.json, and
Harbor's trial counters skip files), so a failure to write them never fails a cell.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from datetime import UTC, datetime
from pathlib import Path

from amber_pipeline.cells import NO_MODEL
from amber_pipeline.jobs.trial_runner import CellRun
from amber_pipeline.warehouse import files

CONFIG = "config.json"
RESULT = "result.json"
log = logging.getLogger(__name__)


def write(run: CellRun, *, finished: bool = False) -> None:
    """Write the cell folder's config.json and result.json from its Trial folders as they are now; `finished`:
    the cell's run has ended. A folder that cannot be written is logged and left."""
    try:
        _write(run, finished)
    except (OSError, ValueError) as e:
        log.warning("Could not describe %s as a Harbor job: %s", run.run_dir, e)


def _write(run: CellRun, finished: bool) -> None:
    from harbor.models.job.config import DatasetConfig, JobConfig
    from harbor.models.job.result import JobResult, JobStats
    from harbor.models.trial.config import AgentConfig

    folder = run.run_dir
    folder.mkdir(parents=True, exist_ok=True)
    model = None if run.cell.model_configuration == NO_MODEL else run.cell.model_name
    config = JobConfig(job_name=folder.name, jobs_dir=folder.parent, n_attempts=run.trials_per_task,
                       agents=[AgentConfig(name=run.cell.agent, model_name=model)],
                       datasets=[DatasetConfig(name=run.benchmark.name)])
    results = _trial_results(folder)
    total = len(run.benchmark.tasks) * run.trials_per_task
    now = datetime.now(UTC)
    started = min((r.started_at for r in results if r.started_at is not None), default=None)
    previous = _started_at(folder / RESULT)
    result = JobResult(
        id=uuid.uuid5(uuid.NAMESPACE_URL, f"amber:{run.job_id}:{run.cell.key}"),
        started_at=previous or started or now, updated_at=now, finished_at=now if finished else None,
        n_total_trials=total, stats=JobStats.from_trial_results(results, n_total_trials=total))
    files.write_text(folder / CONFIG, config.model_dump_json(indent=2))
    files.write_text(folder / RESULT, result.model_dump_json(indent=2, exclude={"trial_results"}))


def _trial_results(folder: Path) -> list:
    """The results of the cell's finished Trials (folders with a result.json that Harbor can read)."""
    from harbor.models.trial.result import TrialResult
    from pydantic import ValidationError

    found = []
    for result in sorted(folder.glob(f"*/{RESULT}")):
        with contextlib.suppress(OSError, ValidationError):
            found.append(TrialResult.model_validate_json(result.read_bytes()))
    return found


def _started_at(path: Path) -> datetime | None:
    """When an earlier write said the cell started: a cell resumed or continued keeps its first start."""
    try:
        return datetime.fromisoformat(json.loads(path.read_text())["started_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
