"""Limits: what a Task may ask of a sandbox, and which time limits it may set, checked before anything runs.

A Task asking for what no sandbox has (GPUs, a TPU, more than 4 cpus, 8192
memory_mb or 10240 storage_mb: `../shared/spec/amber-task-format.md`) or
giving a resource or a timeout that is not a positive, finite number
(`cpus = 0`, `memory_mb = -5`, `timeout_sec = -1`, a Verifier timeout of
`1e309`, which TOML reads as infinity, or `nan`) would fail in Docker or stop
at once, after its Trial was charged. The format names no maximum for a
timeout, so none is set here. Every task.toml timeout counts: the agent's and
the Verifier's, each Environment's build timeout, its healthcheck's times and
the Verifier's collect hooks (a healthcheck's start period may be 0), and the
same of each step.

This module is the one home of these rules: an upload's per-Task checks
(`intake.checks`) and every Quote (`tasks.TaskSpec.limit_refusal`, refused
in `jobs.lifecycle.estimate` before anything is reserved or written) read
them from here, in the same sentences.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from amber_pipeline.benchmarks.intake.task_refusals import table_at
from amber_pipeline.errors import AmberError

if TYPE_CHECKING:
    from harbor.models.task.config import EnvironmentConfig, HealthcheckConfig, TaskConfig, VerifierConfig

MAX_CPUS = 4
MAX_MEMORY_MB = 8192
MAX_STORAGE_MB = 10240


class OverLimits(AmberError):
    """A Task's task.toml asks for more than a sandbox has, or gives a limit that is not a positive number."""


def refusal(name: str, raw: dict[str, Any], config: TaskConfig) -> str | None:
    """The sentence refusing the Task ``name`` for the first limit its task.toml breaks, or None."""
    try:
        check(name, raw, config)
    except OverLimits as e:
        return str(e)
    return None


def check(name: str, raw: dict[str, Any], config: TaskConfig) -> None:
    """Refuse the Task for the first limit it breaks: accelerators, then resources, then timeouts."""
    for table, step, env, written in _environments(raw, config):
        _check_environment(name, table, step, env, written)
    for key, step, seconds, zero_ok in _timeouts(raw, config):
        if seconds is None:
            continue
        if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero_ok):
            kind = "non-negative" if zero_ok else "positive"
            raise OverLimits(f"Task {name} gives {key} = {_number(seconds)}{step}, which is not a {kind}, finite "
                             f"number of seconds: give a {kind} timeout.")


def _check_environment(name: str, table: str, step: str, env: EnvironmentConfig, written: dict[str, Any]) -> None:
    if env.gpus:
        raise OverLimits(f"Task {name} asks for GPUs ({table}.gpus = {env.gpus}{step}), which Amber's sandboxes "
                         "do not have: remove gpus.")
    if env.gpu_types:
        raise OverLimits(f"Task {name} asks for GPU types ({table}.gpu_types{step}), which Amber's sandboxes do "
                         "not have: remove gpu_types.")
    if env.tpu is not None:
        raise OverLimits(f"Task {name} asks for a TPU ({table}.tpu{step}), which Amber's sandboxes do not have: "
                         "remove tpu.")
    for key, legacy, value, limit, unit in (("cpus", None, env.cpus, MAX_CPUS, "cpus"),
                                            ("memory_mb", "memory", env.memory_mb, MAX_MEMORY_MB, "MB of memory"),
                                            ("storage_mb", "storage", env.storage_mb, MAX_STORAGE_MB,
                                             "MB of storage")):
        if value is None:
            continue
        given = f"{table}.{key} = {_number(value)}"
        if legacy and isinstance(written.get(legacy), str) and key not in written:
            given = f'{table}.{legacy} = "{written[legacy]}"'
        shown = f"{given}, {_number(value)} MB" if given.endswith('"') else given
        if not value > 0:
            raise OverLimits(f"Task {name} gives {given}{step}, which is not positive: give a positive {key}.")
        if value > limit:
            raise OverLimits(f"Task {name} asks for {_number(value)} {unit} ({shown}{step}), more than a sandbox "
                             f"has: ask for at most {limit} {unit}.")


def _environments(raw: dict[str, Any],
                  config: TaskConfig) -> list[tuple[str, str, EnvironmentConfig, dict[str, Any]]]:
    """Every Environment table of the Task: its name, the step it is of (or ""), Harbor's reading, and the table
    as written."""
    out = [("[environment]", "", config.environment, table_at(raw, "environment"))]
    if config.verifier.environment is not None:
        out.append(("[verifier.environment]", "", config.verifier.environment,
                    table_at(raw, "verifier", "environment")))
    raw_steps = raw.get("steps") or []
    for step, raw_step in zip(config.steps or [], raw_steps, strict=False):
        if step.verifier.environment is not None:
            out.append(("[steps.verifier.environment]", f" of step {step.name}", step.verifier.environment,
                        table_at(raw_step, "verifier", "environment")))
    return out


def _timeouts(raw: dict[str, Any], config: TaskConfig) -> list[tuple[str, str, float | None, bool]]:
    """Every time limit of the Task: its key, the step it is of (or ""), its seconds, and whether 0 is allowed."""
    found: list[tuple[str, str, float | None, bool]] = [
        ("[agent].timeout_sec", "", config.agent.timeout_sec, False),
        ("[verifier].timeout_sec", "", config.verifier.timeout_sec, False)]
    for table, step, env, _ in _environments(raw, config):
        found.append((f"{table}.build_timeout_sec", step, env.build_timeout_sec, False))
        found += _healthcheck(f"{table[:-1]}.healthcheck]", step, env.healthcheck)
    found += _collect("[[verifier.collect]]", "", config.verifier)
    for s in config.steps or []:
        where = f" of step {s.name}"
        found += [("[steps.agent].timeout_sec", where, s.agent.timeout_sec, False),
                  ("[steps.verifier].timeout_sec", where, s.verifier.timeout_sec, False)]
        found += _healthcheck("[steps.healthcheck]", where, s.healthcheck)
        found += _collect("[[steps.verifier.collect]]", where, s.verifier)
    return found


def _healthcheck(table: str, step: str,
                 check: HealthcheckConfig | None) -> list[tuple[str, str, float | None, bool]]:
    if check is None:
        return []
    return [(f"{table}.timeout_sec", step, check.timeout_sec, False),
            (f"{table}.interval_sec", step, check.interval_sec, False),
            (f"{table}.start_interval_sec", step, check.start_interval_sec, False),
            (f"{table}.start_period_sec", step, check.start_period_sec, True)]


def _collect(table: str, step: str, verifier: VerifierConfig) -> list[tuple[str, str, float | None, bool]]:
    return [(f"{table}.timeout_sec", step, hook.timeout_sec, False) for hook in verifier.collect]


def _number(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)
