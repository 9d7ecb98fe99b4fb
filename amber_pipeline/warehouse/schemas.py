"""Persisted records: one schema module, with a schema version.

Trial rows are the warehouse's ground truth; everything else (per-Task
Rewards, cell aggregates, reports) is derived from them and can be recomputed.
"""

from __future__ import annotations

import contextlib
import functools
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel

from amber_pipeline.cells import cell_file_id

if TYPE_CHECKING:
    import pyarrow as pa

    TRIAL_SCHEMA: pa.Schema
    TRANSCRIPT_SCHEMA: pa.Schema
    TASK_REWARD_SCHEMA: pa.Schema
    CELL_RESULT_SCHEMA: pa.Schema
    COMPARISON_SCHEMA: pa.Schema
    EVIDENCE_SCHEMA: pa.Schema
    SCORING_ROW_SCHEMA: pa.Schema

SCHEMA_VERSION = 4  # 3: metered cached input and model calls, the Agent's own report beside them; 4: the Task's
# content hash and where a sandboxed Trial's time went


class TrialRecord(BaseModel):
    """One Trial: one attempt of one Agent x Model Configuration at one Task, within a Job."""

    schema_version: int = SCHEMA_VERSION
    workspace: str
    job_id: str
    cell_key: str
    benchmark_version_id: str
    task_name: str
    attempt: int  # 1..Trials per Task
    trial_name: str
    agent: str
    agent_version: str
    model_configuration: str
    outcome: str  # scored | errored | cancelled (outcomes.Kind)
    reward: float | None  # None unless scored
    errored: bool
    retries: int  # Errored attempts retried before this one
    error_type: str | None
    error_message: str | None  # one line, no traceback
    input_tokens: int
    output_tokens: int
    cost_usd: float  # what the Wallet is charged: 0 unless the Trial is scored (Errored and cancelled are free)
    started_at: datetime
    finished_at: datetime
    duration_sec: float
    image_id: str | None
    trial_dir: str
    # input_tokens/output_tokens above are what the model proxy metered (and the Wallet charged); the Agent's
    # own report is kept beside them so a disagreement can be shown.
    cached_input_tokens: int = 0
    model_calls: int = 0
    agent_input_tokens: int | None = None
    agent_output_tokens: int | None = None
    agent_cost_usd: float | None = None
    # The Task's content hash (`BenchmarkVersion.task_hash`: the same Task in any Version), and where a sandboxed
    # Trial's duration went, from Harbor's phase timings: its image (built, or waited for), the Agent (setup and
    # run), the Verifier, and the rest of the Environment's life (start, copies, stop). The four sum to
    # duration_sec. None where unknown: a static Trial, a Trial that failed before Harbor timed it, older rows.
    task_hash: str | None = None
    image_sec: float | None = None
    environment_sec: float | None = None
    agent_sec: float | None = None
    verifier_sec: float | None = None

    @property
    def key(self) -> str:
        return trial_key(self.job_id, self.cell_key, self.task_name, self.attempt)


def trial_key(job_id: str, cell_key: str, task_name: str, attempt: int) -> str:
    """A Trial attempt's identity, which keys its charge and its transcripts: Job, cell, Task, attempt."""
    return f"{job_id}/{cell_file_id(cell_key)}/{task_name}/{attempt}"


@functools.cache
def _arrow_schemas() -> dict[str, pa.Schema]:
    """The Parquet files' Arrow schemas, built at first use (`__getattr__`), so that a process which only reads
    the catalog (`amber job status`) never loads Arrow."""
    import pyarrow as pa

    TRIAL_SCHEMA = pa.schema([
        ("schema_version", pa.int32()),
        ("workspace", pa.string()),
        ("job_id", pa.string()),
        ("cell_key", pa.string()),
        ("benchmark_version_id", pa.string()),
        ("task_name", pa.string()),
        ("attempt", pa.int32()),
        ("trial_name", pa.string()),
        ("agent", pa.string()),
        ("agent_version", pa.string()),
        ("model_configuration", pa.string()),
        ("outcome", pa.string()),
        ("reward", pa.float64()),
        ("errored", pa.bool_()),
        ("retries", pa.int32()),
        ("error_type", pa.string()),
        ("error_message", pa.string()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("duration_sec", pa.float64()),
        ("image_id", pa.string()),
        ("trial_dir", pa.string()),
        ("cached_input_tokens", pa.int64()),
        ("model_calls", pa.int32()),
        ("agent_input_tokens", pa.int64()),
        ("agent_output_tokens", pa.int64()),
        ("agent_cost_usd", pa.float64()),
        ("task_hash", pa.string()),
        ("image_sec", pa.float64()),
        ("environment_sec", pa.float64()),
        ("agent_sec", pa.float64()),
        ("verifier_sec", pa.float64()),
    ])

    # One model call of a Trial as the model proxy saw it: the pinned request and the response (no headers, no key).
    TRANSCRIPT_SCHEMA = pa.schema([
        ("workspace", pa.string()),
        ("job_id", pa.string()),
        ("cell_key", pa.string()),
        ("trial_key", pa.string()),
        ("retry", pa.int32()),
        ("seq", pa.int32()),
        ("wire", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("duration_ms", pa.float64()),
        ("status", pa.int32()),
        ("streamed", pa.bool_()),
        ("request", pa.string()),
        ("response", pa.string()),
        ("input_tokens", pa.int64()),
        ("cached_input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("served_by", pa.string()),
        ("signal", pa.string()),
    ])

    TASK_REWARD_SCHEMA = pa.schema([
        ("workspace", pa.string()),
        ("cell_key", pa.string()),
        ("task_name", pa.string()),
        ("n_trials", pa.int64()),
        ("n_errored", pa.int64()),
        ("mean_reward", pa.float64()),
    ])

    CELL_RESULT_SCHEMA = pa.schema([
        ("workspace", pa.string()),
        ("cell_key", pa.string()),
        ("benchmark_version_id", pa.string()),
        ("agent", pa.string()),
        ("model_configuration", pa.string()),
        ("n_tasks", pa.int64()),
        ("n_trials", pa.int64()),
        ("mean_reward", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("cost_usd", pa.float64()),
        ("mean_duration_sec", pa.float64()),
        ("errored", pa.int64()),
    ])


    # Paired comparisons of two cells that pair (scoring.engine), per Workspace (written by scoring.store).
    COMPARISON_SCHEMA = pa.schema([
        ("workspace", pa.string()),
        ("benchmark_version_id", pa.string()),
        ("agent", pa.string()),
        ("better", pa.string()),  # Model Configuration name; with equal means or no shared Task, the earlier cell
        ("worse", pa.string()),
        ("mean_difference", pa.float64()),  # better - worse over shared Tasks; NaN with no shared Task
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("n_shared_tasks", pa.int64()),
        ("too_close_to_call", pa.bool_()),
        ("better_cell_key", pa.string()),
        ("worse_cell_key", pa.string()),
    ])


    # Evidence of a Trial attempt (analysis.evidence.TrialEvidence) with its outcome and cause, as stored for
    # imported Harbor folders and Amber's own Trials.
    EVIDENCE_SCHEMA = pa.schema([
        ("workspace", pa.string()),
        ("folder", pa.string()),  # the resolved Harbor job folder
        ("source", pa.string()),
        ("trial_name", pa.string()),
        ("task_name", pa.string()),
        ("agent", pa.string()),
        ("model", pa.string()),
        ("attempt", pa.int32()),
        ("reward", pa.float64()),
        ("errored", pa.bool_()),
        ("exception_type", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("agent_duration_sec", pa.float64()),
        ("agent_timeout_sec", pa.float64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("model_used", pa.bool_()),
        ("trajectory_steps", pa.int32()),
        ("trajectory_ended_with_error", pa.bool_()),
        ("repeated_tool_error", pa.bool_()),
        ("tests_passed", pa.int32()),
        ("tests_total", pa.int32()),
        ("trial_dir", pa.string()),
        ("outcome", pa.string()),  # passed / failed / errored / unscored (analysis.report.outcome)
        ("cause", pa.string()),  # why a non-passed attempt failed (analysis.report.failure_cause); null when passed
    ])


    # The scoring engine's input: one row per Trial that is a result, whoever provides it (the stored Trials through
    # scoring.store.trial_rows, or a report's evidence through analysis.scores). Not stored.
    def _column(name: str, kind: pa.DataType, doc: str) -> pa.Field:
        return pa.field(name, kind, metadata={"doc": doc})


    SCORING_ROW_SCHEMA = pa.schema([
        _column("scope", pa.string(), "who the numbers are for: a Workspace, or a report's source"),
        _column("cell", pa.string(), "the cell's key; unique within its scope"),
        _column("benchmark", pa.string(), "the Benchmark Version (a comparison never crosses it)"),
        _column("agent", pa.string(), "the Agent's name"),
        _column("agent_version", pa.string(), "the Agent Version (only cells of one Agent Version pair)"),
        _column("model", pa.string(), "the Model Configuration; null for an Agent that calls no model"),
        _column("task", pa.string(), "the Task's name"),
        _column("reward", pa.float64(), "the Reward; null when the Trial has none (Errored, or no Verifier result)"),
        _column("errored", pa.bool_(), "the Trial is Errored"),
        _column("cost_usd", pa.float64(), "what the Trial cost; null counts as 0"),
        _column("duration_sec", pa.float64(), "how long the Trial took; null when unknown"),
    ])

    return {name: schema for name, schema in locals().items() if name.endswith("_SCHEMA")}


def __getattr__(name: str) -> pa.Schema:
    if name.endswith("_SCHEMA"):  # not for what the import system asks of every module (`__path__`)
        with contextlib.suppress(KeyError):
            return _arrow_schemas()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The columns every Trial file has had, whatever its schema version: a file without them is not a Trial file.
TRIAL_REQUIRED = tuple(name for name, field in TrialRecord.model_fields.items() if field.is_required())


def trials_table(records: list[TrialRecord]) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_pylist([r.model_dump() for r in records], schema=_arrow_schemas()["TRIAL_SCHEMA"])
