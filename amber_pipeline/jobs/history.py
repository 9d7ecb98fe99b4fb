"""What scored Trials used, kept by part, so that a Quote prices a Trial from what is known of its Task and its cell.

A sandboxed Trial's time has two owners:

- the **Task**: its image (built once per engine, or waited for), the rest of
  its Environment's life (start, copies, stop) and its Verifier. These do not
  depend on who runs the Task, so they are learned from every scored Trial of
  the Task: any Agent, any cell, any Job, the oracle and nop Trials of an
  upload's validation included. A Task is known by the hash of its own files
  (`BenchmarkVersion.task_hash`), so what its Trials taught follows it into
  every Benchmark Version that holds it. Timings of Trials of a public
  Benchmark Version are public (scope ``public``) and count for every
  Workspace; those of a private one count for its Workspace alone;
- the **cell's Agent Version and Model Configuration** (`cells.agent_model`:
  the cell key without its Benchmark Version): the Agent's time (setup and run)
  and the tokens it metered. They stay within the Workspace that spent them.

Each scored Trial attempt is one row of the catalog's ``trial_usage``,
written in the transaction that charges it (`lifecycle.charge_trials`), keyed
by the attempt, so a Trial charged again after a crash is counted once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from amber_pipeline.benchmarks.registry import PUBLIC
from amber_pipeline.cells import agent_model
from amber_pipeline.models.wire import Usage
from amber_pipeline.warehouse.catalog import Connection

if TYPE_CHECKING:  # Arrow's schemas: not for a command that only quotes
    from amber_pipeline.warehouse.schemas import TrialRecord

# A cached image is found in milliseconds; a Trial whose image time passes this built it, or waited for a build.
IMAGE_BUILT_SEC = 1.0


def record(con: Connection, workspace: str, benchmark_owner: str, trials: Sequence[TrialRecord]) -> None:
    """Keep what the scored ``trials`` used, once per attempt, inside the caller's transaction (their charge's)."""
    scope = PUBLIC if benchmark_owner == PUBLIC else workspace
    rows = [[t.key, scope, workspace, t.task_hash, agent_model(t.cell_key), t.image_sec, t.environment_sec,
             t.agent_sec, t.verifier_sec, t.duration_sec, t.input_tokens, t.cached_input_tokens, t.output_tokens,
             datetime.now(UTC)] for t in trials if t.outcome == "scored"]
    if not rows:
        return
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(rows))
    con.execute("insert into trial_usage (trial_key, scope, workspace, task_hash, agent_model, image_sec, "
                "environment_sec, agent_sec, verifier_sec, duration_sec, input_tokens, cached_input_tokens, "
                f"output_tokens, recorded_at) values {values} on conflict (trial_key) do nothing",
                [v for row in rows for v in row])


@dataclass(frozen=True)
class TaskTimes:
    """What a Task's scored sandboxed Trials took, whoever ran them: mean seconds."""

    trials: int
    environment_sec: float
    verifier_sec: float
    builds: int = 0  # Trials that built its image (or waited for its build)
    build_sec: float = 0.0  # their mean image time; 0 with none


def task_times(con: Connection, workspace: str, task_hashes: Sequence[str]) -> dict[str, TaskTimes]:
    """Task hash -> what its Trials took, from the Trials the Workspace may learn from: its own, and every
    Trial of a public Benchmark Version."""
    if not task_hashes:
        return {}
    rows = con.execute(
        "select task_hash, count(*), avg(environment_sec), avg(verifier_sec), "
        "count(*) filter (where image_sec >= ?), coalesce(avg(image_sec) filter (where image_sec >= ?), 0) "
        "from trial_usage where task_hash in (select unnest(?)) and environment_sec is not null "
        "and (scope = ? or workspace = ?) group by task_hash",
        [IMAGE_BUILT_SEC, IMAGE_BUILT_SEC, sorted(set(task_hashes)), PUBLIC, workspace]).fetchall()
    return {h: TaskTimes(int(n), float(env), float(ver), int(builds), float(build))
            for h, n, env, ver, builds, build in rows}


@dataclass(frozen=True)
class AgentUse:
    """What a cell's Agent used over some scored Trials: how many, their metered tokens, their Agent seconds."""

    trials: int = 0
    usage: Usage = Usage()
    agent_sec: float = 0.0

    def __add__(self, other: AgentUse) -> AgentUse:
        return AgentUse(self.trials + other.trials, self.usage + other.usage, self.agent_sec + other.agent_sec)

    def mean(self) -> tuple[Usage, float]:
        """Tokens and Agent seconds of one of these Trials, on average."""
        n = self.trials
        u = self.usage
        return Usage(round(u.input_tokens / n), round(u.cached_input_tokens / n),
                     round(u.output_tokens / n)), self.agent_sec / n


def agent_use(con: Connection, workspace: str, cell_key: str) -> dict[str | None, AgentUse]:
    """Task hash -> what the cell's Agent Version and Model Configuration used on that Task, in this Workspace
    (on any Benchmark Version that holds the Task)."""
    rows = con.execute(
        "select task_hash, count(*), sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), "
        "coalesce(sum(agent_sec), 0) from trial_usage where workspace = ? and agent_model = ? group by task_hash",
        [workspace, agent_model(cell_key)]).fetchall()
    return {h: AgentUse(int(n), Usage(int(i), int(c), int(o)), float(sec)) for h, n, i, c, o, sec in rows}
