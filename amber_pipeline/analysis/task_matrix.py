"""A Job's Trials by Task and cell: the Task matrix of its page, and each cell's Trials, which a Trial's page steps
through.

Both read the Job's cells (`records.cells_of`) and each cell's stored evidence (`sources.derive`: one small
Parquet file per cell, derived once per version of the cell's Trial file and shared with `amber results`), so an
outcome reads the same on the matrix, on a Trial's page and in the report. The matrix's per-Task means are the
scoring engine's (`scores.score_evidence`), never computed here. Both are kept while the Job's Trial files are
unchanged (`memo.py`).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from amber_pipeline.analysis import scores, sources
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.memo import Memo
from amber_pipeline.analysis.report import MissingTask, MissingTasks, Outcome
from amber_pipeline.cells import NO_MODEL, cell_file_id, model_name
from amber_pipeline.jobs.records import Job, JobCell, cells_of
from amber_pipeline.warehouse.catalog import Warehouse

# ---------------------------------------------------------------- records


class CellRef(BaseModel):
    """A cell of the Job as its report names it."""

    route: str = Field(description="The Agent, or Agent/Model Configuration: the cell's name in the report.")
    cell_key: str
    agent: str
    model: str | None = Field(description="The Model Configuration's name; null for the bounds (oracle, nop).")


class TrialRef(BaseModel):
    """One Trial as a page links to it: its name with its cell's key, since every cell of a Job names its Trials
    alike (`<task>__<attempt>`)."""

    trial: str
    cell_key: str
    route: str
    task: str
    attempt: int
    outcome: Outcome
    reward: float | None


class MatrixColumn(CellRef):
    """A column of the Task matrix: a cell, and for a Job that stopped early the Tasks it still misses."""

    missing_tasks: list[MissingTask] | None = Field(description="For a Job that stopped early (ceiling_reached or "
                                                                "cancelled): the cell's Tasks without all their "
                                                                "scored Trials (as `results` gives them); else null.")


class MatrixEntry(BaseModel):
    """One Task in one cell: its attempts and their mean Reward."""

    cell_key: str
    attempts: list[TrialRef] = Field(description="In attempt order; empty when the cell has not tried the Task.")
    mean_reward: float | None = Field(description="The scoring engine's per-Task mean: the mean Reward over the "
                                                  "attempts with a Reward that are not Errored; null without one.")
    missing_trials: int = Field(0, description="Trials still to run for the Task in this cell (a Job that stopped "
                                               "early).")


class TaskRow(BaseModel):
    """One Task across the Job's cells."""

    task: str
    entries: list[MatrixEntry] = Field(description="One per column, in the columns' order.")
    differs: bool = Field(description="The cells with a mean Reward for the Task do not all have the same one "
                                      "(a cell without one is left out of the comparison).")


class TaskMatrix(BaseModel):
    """A Job's Trials by Task (rows) and cell (columns): where the cells differ comes first, so a reader starts
    with the Tasks that separate them."""

    job_id: str
    columns: list[MatrixColumn]
    rows: list[TaskRow] = Field(description="The differing Tasks first, then by Task name.")


CELLS: Memo[list[tuple[TrialEvidence, Outcome]]] = Memo(256)  # a cell's Trials (a Trial's neighbours read each cell's)
MATRICES: Memo[TaskMatrix] = Memo(16)


# ---------------------------------------------------------------- the Job's Trials, by cell


def route_of(cell: JobCell) -> str:
    """A cell's route as `TrialEvidence.route` and the report name it: Agent/model, or the Agent alone."""
    model = model_name(cell.model_configuration)
    return cell.agent if cell.model_configuration == NO_MODEL else f"{cell.agent}/{model}"


def cell_ref(cell: JobCell) -> CellRef:
    model = None if cell.model_configuration == NO_MODEL else model_name(cell.model_configuration)
    return CellRef(route=route_of(cell), cell_key=cell.cell_key, agent=cell.agent, model=model)


def cell_evidence(wh: Warehouse, workspace: str, job_id: str, cell: JobCell) -> list[tuple[TrialEvidence, Outcome]]:
    """The cell's Trials that are results, each with its outcome, in Task then attempt order: the cell's stored
    evidence, derived now only when its Trial file changed since (`sources.derive`)."""
    files = tuple(wh.store.files(wh.paths.trials / cell_file_id(cell.cell_key), f"{job_id}.parquet"))

    def read() -> list[tuple[TrialEvidence, Outcome]]:
        found = []
        for stored in files:
            table = wh.read_parquet(sources.derive(wh, stored.path, stored))
            rows = [] if table is None else table.to_pylist()
            found += [(TrialEvidence(**{k: r[k] for k in sources.FIELDS}), r["outcome"])
                      for r in rows if r["workspace"] == workspace]
        return sorted(found, key=lambda f: (f[0].task_name, f[0].attempt))

    return CELLS.get((wh.paths.home, workspace, job_id, cell.cell_key, files), read)


def trial_ref(cell: JobCell, e: TrialEvidence, outcome: Outcome) -> TrialRef:
    return TrialRef(trial=e.trial_name, cell_key=cell.cell_key, route=route_of(cell), task=e.task_name,
                    attempt=e.attempt, outcome=outcome, reward=e.reward)


# ---------------------------------------------------------------- the Task matrix


def task_matrix(wh: Warehouse, workspace: str, job: Job, missing: list[MissingTasks] | None) -> TaskMatrix:
    """The Job's Task matrix; ``missing`` is the Job record's Tasks still missing per cell (None unless it stopped
    early). Kept while the Job's cells, Trial files and missing Tasks are unchanged."""
    cells = cells_of(wh, job.id)
    key = (sources.job_version(wh, workspace, job.id), tuple(cells),
           None if missing is None else tuple(m.model_dump_json() for m in missing))
    return MATRICES.get(key, lambda: _task_matrix(wh, workspace, job, cells, missing))


def _task_matrix(wh: Warehouse, workspace: str, job: Job, cells: list[JobCell],
                 missing: list[MissingTasks] | None) -> TaskMatrix:
    by_cell = {c.cell_key: cell_evidence(wh, workspace, job.id, c) for c in cells}
    evidence = [e for found in by_cell.values() for e, _ in found]
    means: dict[tuple[str, str], float | None] = {}
    if evidence:
        from amber_pipeline.scoring.bootstrap import MIN_RESAMPLES, Resampling  # NumPy: for a matrix, not its types

        # only the per-Task means are read from the engine, and resampling never changes them: the fewest resamples
        for scored in scores.score_evidence(evidence, Resampling(n_resamples=MIN_RESAMPLES)).cells:
            for row in scored.task_rewards.to_pylist():
                means[(row["cell"], row["task"])] = row["mean_reward"]
    missing_of = {m.cell_key: m.tasks for m in missing or []}
    columns = [MatrixColumn(**cell_ref(c).model_dump(),
                            missing_tasks=None if missing is None else missing_of.get(c.cell_key, []))
               for c in cells]
    tasks = sorted({e.task_name for e in evidence} | {t.task for m in missing or [] for t in m.tasks})
    by_task: dict[tuple[str, str], list[tuple[TrialEvidence, Outcome]]] = {}
    for c in cells:  # each cell's Trials grouped once, not filtered again for every Task
        for e, o in by_cell[c.cell_key]:
            by_task.setdefault((c.cell_key, e.task_name), []).append((e, o))
    rows = []
    for task in tasks:
        entries = []
        for c in cells:
            attempts = by_task.get((c.cell_key, task), [])
            left = next((t.trials for t in missing_of.get(c.cell_key, []) if t.task == task), 0)
            mean = means.get((scores.cell_of(attempts[0][0]), task)) if attempts else None
            entries.append(MatrixEntry(cell_key=c.cell_key, attempts=[trial_ref(c, e, o) for e, o in attempts],
                                       mean_reward=mean, missing_trials=left))
        rewarded = {e.mean_reward for e in entries if e.mean_reward is not None}
        rows.append(TaskRow(task=task, entries=entries, differs=len(rewarded) > 1))
    rows.sort(key=lambda r: (not r.differs, r.task))
    return TaskMatrix(job_id=job.id, columns=columns, rows=rows)
