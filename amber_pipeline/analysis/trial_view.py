"""One Trial in full, as its page shows it: its outcome and attempts, the Verifier's output, the timing of its
phases, the Agent's trajectory step by step, every model call the proxy recorded, and its neighbours.

It reads only that Trial: its stored row, its own Harbor folder (`result.json`, the Verifier's files, the ATIF
`agent/trajectory.json`) and one scan of its cell's transcripts filtered by its trial key; the neighbours come from
the cells' Trials (`task_matrix.cell_evidence`). A static Trial (the Direct Agent) has no folder: its page shows
its row, its model calls and its Verifier's sentence.

Every text that comes from a Trial (a log, a message, a request body) is bounded (`Bounded`), and everything
here is data: whoever shows it escapes it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from amber_pipeline.analysis import sources
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.report import Outcome
from amber_pipeline.analysis.task_matrix import CellRef, TrialRef, cell_evidence, cell_ref, trial_ref
from amber_pipeline.analysis.trial_folders import (
    atif_trajectory,
    dig,
    message_text,
    phase_seconds,
    read_json,
    timestamp,
)
from amber_pipeline.cells import NO_MODEL, cell_file_id
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.jobs.records import Job, JobCell, cells_of
from amber_pipeline.models.configurations import ModelConfiguration, model_configuration
from amber_pipeline.models.wire import Usage
from amber_pipeline.money.prices import Prices
from amber_pipeline.user_text import quoted
from amber_pipeline.warehouse import instances, schemas, sql
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.retention import MARKER
from amber_pipeline.warehouse.schemas import TrialRecord, trial_key

TEXT_CHARACTERS = 16_384  # one trajectory text, tool argument or model-call body
FILE_CHARACTERS = 65_536  # one Verifier file
MAX_STEPS = 2_000  # trajectory steps shown; the rest are counted, not sent
MAX_TESTS = 500  # Verifier test cases shown


# ---------------------------------------------------------------- records


class Bounded(BaseModel):
    """A text from a Trial cut at a bound, so one runaway log or body cannot make a page or an API answer
    megabytes long; `truncated` says the rest was left out."""

    text: str
    truncated: bool = False


class TrialError(BaseModel):
    """Why a Trial Errored, or what stopped its Agent (an exception of its own, such as its time limit)."""

    type: str | None
    message: Bounded | None


class TestCase(BaseModel):
    name: str
    status: str
    message: Bounded | None = None


class TestSummary(BaseModel):
    """The Verifier's test report (`verifier/ctrf.json`, which a Task's test script writes)."""

    tests: int | None
    passed: int | None
    failed: int | None
    cases: list[TestCase]
    truncated: bool = Field(description="More cases than shown.")


class VerifierOutput(BaseModel):
    """What the Verifier wrote and decided."""

    rewards: dict[str, float] | None
    detail: str | None = Field(description="A static Trial's built-in Verifier: why the answer failed its checks.")
    stdout: Bounded | None = Field(description="verifier/test-stdout.txt (Harbor merges the tests' stderr in).")
    stderr: Bounded | None = Field(description="verifier/test-stderr.txt, when a Verifier wrote one.")
    tests: TestSummary | None


Phase = Literal["environment_setup", "agent_setup", "agent_execution", "verifier"]
PHASES: tuple[Phase, ...] = ("environment_setup", "agent_setup", "agent_execution", "verifier")


class PhaseTime(BaseModel):
    """One phase of a sandboxed Trial, from Harbor's result.json timestamps."""

    phase: Phase
    started_at: datetime
    finished_at: datetime
    seconds: float
    offset_sec: float | None = Field(description="Seconds from the Trial's start to the phase's, for drawing bars.")


class ToolCall(BaseModel):
    call_id: str | None
    name: str
    arguments: Bounded = Field(description="The arguments as JSON text.")


class ObservationResult(BaseModel):
    call_id: str | None = Field(description="The tool call it answers; null for other feedback.")
    content: Bounded


class StepMetrics(BaseModel):
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    cost_usd: float | None


class TrajectoryStep(BaseModel):
    """One ATIF step: who spoke, what they said, the tools the Agent called and what came back."""

    step_id: int | None
    source: str = Field(description="system, user or agent.")
    timestamp: datetime | None
    model_name: str | None
    message: Bounded
    reasoning: Bounded | None
    tool_calls: list[ToolCall]
    observations: list[ObservationResult]
    metrics: StepMetrics | None


class Trajectory(BaseModel):
    """The Agent's agent/trajectory.json (ATIF), its continuation files followed, copied context left out."""

    agent: str | None
    agent_version: str | None
    model_name: str | None
    steps: list[TrajectoryStep]
    steps_left_out: int = Field(0, description="Steps past the number shown.")


class ModelCall(BaseModel):
    """One model call of the Trial as the model proxy metered it."""

    retry: int = Field(description="The retry of the attempt that made it (0: the first try); the Trial's row is "
                                   "its last retry's.")
    seq: int
    started_at: datetime
    latency_ms: float
    status: int = Field(description="The HTTP status the Agent got.")
    streamed: bool
    wire: str = Field(description="The wire format: chat, messages or responses.")
    provider: str | None = Field(description="The Provider that served it, as the proxy saw it.")
    signal: str | None = Field(description="What the Provider did wrong, when it did (Errored attempts).")
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    cost_usd: float | None = Field(description="Its tokens at the Model Configuration's prices; null when the "
                                               "configuration is no longer known.")
    request: Bounded
    response: Bounded


class Neighbours(BaseModel):
    """Where a reader goes next: the cell's previous and next Trial (by Task, then attempt), and the same Task in
    each other cell."""

    previous: TrialRef | None
    next: TrialRef | None
    other_cells: list[TrialRef] = Field(description="The same Task's Trial in each other cell (the same attempt, "
                                                    "else the cell's last one), in the Job's cell order.")


class TrialDetail(BaseModel):
    """One Trial in full: what it was, how it ended and why, what the Agent did, and every model call."""

    job_id: str
    cell: CellRef
    trial: str
    task: str
    attempt: int
    attempts: list[TrialRef] = Field(description="Every attempt of the Task in the cell, this one included.")
    outcome: Outcome
    reward: float | None
    retries: int = Field(description="Errored tries of this attempt retried before this one.")
    error: TrialError | None
    started_at: datetime
    finished_at: datetime
    duration_sec: float
    input_tokens: int = Field(description="What the model proxy metered (and the Wallet charged).")
    cached_input_tokens: int
    output_tokens: int
    cost_usd: float = Field(description="What the Wallet was charged for it (0 unless it scored).")
    has_folder: bool = Field(description="A Harbor trial folder exists (a static Trial has none).")
    transcripts_expired: bool = Field(description="Its trajectory and logs were deleted after 90 days.")
    verifier: VerifierOutput | None
    phases: list[PhaseTime]
    trajectory: Trajectory | None
    model_calls: list[ModelCall]
    neighbours: Neighbours


# ---------------------------------------------------------------- one Trial


def no_trial(job_id: str, trial: str) -> NotFound:
    """The one sentence for a Trial the Job does not have, whoever's it is elsewhere."""
    return NotFound(f"No Trial {quoted(trial)} in Job {job_id}: pick one from the Job's Tasks "
                    f"(`GET .../jobs/{job_id}/tasks`).")


def trial_detail(wh: Warehouse, workspace: str, job: Job, trial: str, cell_key: str | None = None,
                 prices: Prices | None = None) -> TrialDetail:
    """Trial ``trial`` of the Job (``cell_key``: its cell, needed when several cells have a Trial so named)."""
    cells = cells_of(wh, job.id)
    by_cell = {c.cell_key: cell_evidence(wh, workspace, job.id, c) for c in cells}  # the neighbours need them all
    named = [(c, e, o) for c in cells for e, o in by_cell[c.cell_key]
             if e.trial_name == trial and cell_key in (None, c.cell_key)]
    if not named:
        raise no_trial(job.id, trial)
    if len({c.cell_key for c, _, _ in named}) > 1:
        raise AmberError(f"Trial {quoted(trial)} is in {len(named)} cells of Job {job.id}: name its cell with "
                         f"cell_key, one of {', '.join(c.cell_key for c, _, _ in named)}.")
    cell, e, outcome = named[0]
    record = _record(wh, job.id, cell, trial)
    if record is None:
        raise no_trial(job.id, trial)
    folder = _folder(wh, record.trial_dir)
    result = read_json(folder / "result.json") if folder is not None else None
    result = result if isinstance(result, dict) else {}
    error = (TrialError(type=record.error_type, message=_bound(record.error_message, TEXT_CHARACTERS))
             if record.error_type else None)
    verifier = _verifier(folder, result, record)
    return TrialDetail(
        job_id=job.id, cell=cell_ref(cell), trial=trial, task=e.task_name, attempt=e.attempt,
        attempts=[trial_ref(cell, a, o) for a, o in by_cell[cell.cell_key] if a.task_name == e.task_name],
        outcome=outcome, reward=e.reward, retries=record.retries, error=error, started_at=record.started_at,
        finished_at=record.finished_at, duration_sec=record.duration_sec, input_tokens=record.input_tokens,
        cached_input_tokens=record.cached_input_tokens, output_tokens=record.output_tokens,
        cost_usd=record.cost_usd, has_folder=folder is not None,
        transcripts_expired=folder is not None and (folder / MARKER).exists(), verifier=verifier,
        phases=_phases(result), trajectory=None if folder is None else _trajectory_of(folder),
        model_calls=_model_calls(wh, workspace, record, cell, prices or Prices()),
        neighbours=_neighbours(cells, by_cell, cell, e))


def _record(wh: Warehouse, job_id: str, cell: JobCell, trial: str) -> TrialRecord | None:
    """The Trial's stored row: its cell's Trial file, filtered to it before any row is built."""
    import pyarrow.compute as pc

    table = wh.read_parquet(wh.trials_file(cell_file_id(cell.cell_key), job_id))
    if table is None:
        return None
    rows = table.filter(pc.equal(table["trial_name"], trial)).to_pylist()
    kept = [r for r in rows if r["outcome"] != "cancelled"]
    return TrialRecord.model_validate(kept[-1]) if kept else None


def _folder(wh: Warehouse, trial_dir: str) -> Path | None:
    """The Trial's Harbor folder on this machine (fetched from the result store when it must be); None for a
    static Trial, which has none."""
    folder = sources.here(wh, trial_dir)  # where another machine's home put it, here
    return folder if folder is not None and wh.store.fetch_folder(folder) and folder.is_dir() else None


def _neighbours(cells: Sequence[JobCell], by_cell: dict[str, list[tuple[TrialEvidence, Outcome]]], cell: JobCell,
                e: TrialEvidence) -> Neighbours:
    own = by_cell[cell.cell_key]
    at = next(i for i, (a, _) in enumerate(own) if a.trial_name == e.trial_name)
    others = []
    for c in cells:
        if c.cell_key == cell.cell_key:
            continue
        same = [(a, o) for a, o in by_cell.get(c.cell_key, []) if a.task_name == e.task_name]
        pick = next(((a, o) for a, o in same if a.attempt == e.attempt), same[-1] if same else None)
        if pick is not None:
            others.append(trial_ref(c, *pick))
    return Neighbours(previous=trial_ref(cell, *own[at - 1]) if at > 0 else None,
                      next=trial_ref(cell, *own[at + 1]) if at + 1 < len(own) else None, other_cells=others)


# ---- texts and files


def _bound(text: str | None, limit: int) -> Bounded | None:
    if text is None:
        return None
    return Bounded.model_construct(text=text[:limit], truncated=len(text) > limit)


def _text_of(value: Any, limit: int = TEXT_CHARACTERS) -> Bounded:
    return _bound(value if isinstance(value, str) else message_text(value), limit) or Bounded(text="")


def _file(path: Path, limit: int = FILE_CHARACTERS) -> Bounded | None:
    """A text file's start: at most ``limit`` characters, read without reading the rest of a huge file."""
    try:
        with path.open("rb") as f:
            head = f.read(4 * limit + 4)  # a UTF-8 character is at most 4 bytes
            more = bool(f.read(1))
    except OSError:
        return None
    text = head.decode("utf-8", errors="replace")
    return Bounded.model_construct(text=text[:limit], truncated=more or len(text) > limit)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ---- the Verifier


def _verifier(folder: Path | None, result: dict[str, Any], record: TrialRecord) -> VerifierOutput | None:
    detail = record.error_message if record.error_type is None and folder is None else None
    if folder is None:
        rewards = None if record.reward is None else {"reward": record.reward}
        return VerifierOutput(rewards=rewards, detail=detail, stdout=None, stderr=None, tests=None)
    raw = dig(result, "verifier_result", "rewards")
    rewards = ({k: v for k, v in ((k, _number(v)) for k, v in raw.items()) if v is not None}
               if isinstance(raw, dict) else None)
    return VerifierOutput(rewards=rewards or None, detail=None, stdout=_file(folder / "verifier" / "test-stdout.txt"),
                          stderr=_file(folder / "verifier" / "test-stderr.txt"), tests=_tests(folder))


def _tests(folder: Path) -> TestSummary | None:
    results = dig(read_json(folder / "verifier" / "ctrf.json"), "results")
    if not isinstance(results, dict):
        return None
    summary = results["summary"] if isinstance(results.get("summary"), dict) else {}
    listed = [t for t in results.get("tests") or [] if isinstance(t, dict)]
    cases = [TestCase(name=str(t.get("name", "")), status=str(t.get("status", "")),
                      message=_bound(t["message"], TEXT_CHARACTERS) if isinstance(t.get("message"), str) else None)
             for t in listed[:MAX_TESTS]]
    return TestSummary(tests=_int(summary.get("tests")), passed=_int(summary.get("passed")),
                       failed=_int(summary.get("failed")), cases=cases, truncated=len(listed) > MAX_TESTS)


# ---- timing


def _phases(result: dict[str, Any]) -> list[PhaseTime]:
    start = timestamp(result.get("started_at"))
    found = []
    for phase in PHASES:
        began, ended = timestamp(dig(result, phase, "started_at")), timestamp(dig(result, phase, "finished_at"))
        seconds = phase_seconds(result.get(phase))
        if began is None or ended is None or seconds is None:
            continue
        found.append(PhaseTime(phase=phase, started_at=began, finished_at=ended, seconds=seconds,
                               offset_sec=None if start is None else (began - start).total_seconds()))
    return found


# ---- the trajectory


def _trajectory_of(folder: Path) -> Trajectory | None:
    found = atif_trajectory(folder)
    if found is None:
        return None
    agent, steps = found
    return Trajectory(agent=_str(agent.get("name")), agent_version=_str(agent.get("version")),
                      model_name=_str(agent.get("model_name")), steps=[_step(s) for s in steps[:MAX_STEPS]],
                      steps_left_out=max(len(steps) - MAX_STEPS, 0))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _step(step: dict[str, Any]) -> TrajectoryStep:
    """One step as its record, every value typed here, so the records are built without validating each again
    (a 300-step trajectory is thousands of small records)."""
    calls = [c for c in step.get("tool_calls") or [] if isinstance(c, dict)]
    results = [r for r in dig(step, "observation", "results") or [] if isinstance(r, dict)]
    metrics = step.get("metrics")
    reasoning = step.get("reasoning_content")
    return TrajectoryStep.model_construct(
        step_id=_int(step.get("step_id")), source=str(step.get("source") or ""),
        timestamp=timestamp(step.get("timestamp")), model_name=_str(step.get("model_name")),
        message=_text_of(step.get("message")), reasoning=_text_of(reasoning) if reasoning else None,
        tool_calls=[ToolCall.model_construct(
            call_id=_str(c.get("tool_call_id")), name=str(c.get("function_name") or ""),
            arguments=_text_of(json.dumps(c.get("arguments"), ensure_ascii=False, indent=2))) for c in calls],
        observations=[ObservationResult.model_construct(call_id=_str(r.get("source_call_id")),
                                                        content=_text_of(r.get("content"))) for r in results],
        metrics=StepMetrics.model_construct(
            prompt_tokens=_int(metrics.get("prompt_tokens")), completion_tokens=_int(metrics.get("completion_tokens")),
            cached_tokens=_int(metrics.get("cached_tokens")),
            cost_usd=_number(metrics.get("cost_usd"))) if isinstance(metrics, dict) else None)


# ---- model calls


CALL_COLUMNS = ("retry", "seq", "started_at", "duration_ms", "status", "streamed", "wire", "served_by", "signal",
                "input_tokens", "cached_input_tokens", "output_tokens", "request", "response")


def _model_calls(wh: Warehouse, workspace: str, record: TrialRecord, cell: JobCell,
                 prices: Prices) -> list[ModelCall]:
    """The calls the model proxy recorded for the Trial attempt: one scan of its cell's transcript files (one per
    day the cell made calls) filtered by its trial key, bodies cut in the scan."""
    if cell.model_configuration == NO_MODEL:
        return []
    files = [f.path for f in wh.store.files(wh.paths.transcripts,
                                             f"date=*/{cell_file_id(cell.cell_key)}_{record.job_id}.parquet")]
    if not files:
        return []
    key = trial_key(record.job_id, record.cell_key, record.task_name, record.attempt)
    bodies = {"request", "response"}
    columns = ", ".join(f"left({c}, {TEXT_CHARACTERS}) as {c}, length({c}) > {TEXT_CHARACTERS} as {c}_cut"
                        if c in bodies else c for c in CALL_COLUMNS)
    with instances.scratch() as con:
        scan = wh.store.scan(con, files, schemas.TRANSCRIPT_SCHEMA, "transcripts")
        rows = con.execute(f"select {columns} from {scan} where trial_key = {sql.string(key)} "
                           f"and workspace = {sql.string(workspace)} order by retry, seq").fetch_arrow_table()
    mc = _configuration(wh, workspace, cell)
    calls = []
    for r in rows.to_pylist():
        usage = Usage(r["input_tokens"] or 0, r["cached_input_tokens"] or 0, r["output_tokens"] or 0)
        calls.append(ModelCall(
            retry=r["retry"], seq=r["seq"], started_at=r["started_at"], latency_ms=r["duration_ms"],
            status=r["status"], streamed=r["streamed"], wire=r["wire"], provider=r["served_by"], signal=r["signal"],
            input_tokens=usage.input_tokens, cached_input_tokens=usage.cached_input_tokens,
            output_tokens=usage.output_tokens, cost_usd=None if mc is None else float(prices.model_cost(mc, usage)),
            request=Bounded(text=r["request"] or "", truncated=bool(r["request_cut"])),
            response=Bounded(text=r["response"] or "", truncated=bool(r["response_cut"]))))
    return calls


def _configuration(wh: Warehouse, workspace: str, cell: JobCell) -> ModelConfiguration | None:
    """The cell's Model Configuration as it ran (its ``name@id``); None when it is no longer known."""
    try:
        return model_configuration(cell.model_configuration, wh.paths, workspace)
    except AmberError:
        return None

