"""Reading Harbor trial folders into `TrialEvidence`: the files rules.

A Harbor job folder (what `harbor run` writes: one subfolder per trial with
`result.json`, `agent/trajectory.json` in ATIF, `verifier/ctrf.json`) and an
Amber Job (whose Trials are Harbor trial folders too) give the same records.
Trials without `result.json` (running or crashed) are skipped. A
`result.json` is read with Harbor's `TrialResult` when it validates, else as
plain JSON, key by key.

The rules that read the files (nothing else is copied out of them):
- reward: `rewards["reward"]`, else the alphabetically first numeric key.
- errored, exception_type: `outcomes.classify` on a public Benchmark, with the
  exception `outcomes.from_harbor` would pick (the first not the Agent's own).
- agent_timeout_sec: the run's `override_timeout_sec`, else the Task's
  `task.toml` `[agent].timeout_sec` (when the Task folder still exists), capped
  by `max_timeout_sec` and times the agent (else the general) timeout
  multiplier, as Harbor computes it; None when unknown.
- model_used: some agent step names the configured model (`step.model_name`,
  else the trajectory's `agent.model_name`), with or without the provider
  prefix ("openai/x" matches "x"); None without a trajectory or a model.
- An *error line* is a line of tool output that starts with "error"/"fatal"
  (any case), is a Python exception or traceback header, or ends with
  ": command not found", ": No such file or directory" or ": Permission denied".
  trajectory_ended_with_error: the last agent step's observation holds an
  error line, or the step or one of its observation results has a truthy
  `extra["error"]` / `extra["is_error"]` (Terminus-2's "ERROR: ..." parse
  feedback counts). The agent's own message is not read.
- repeated_tool_error: the last three (or more) tool observations (results
  answering a tool call) all hold the same, non-empty error lines.
- tests_passed / tests_total: `results.summary.passed` / `.tests` of
  `verifier/ctrf.json`.
- attempt: 1.. by `started_at` within (route, Task).
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import outcomes

HARBOR_PREFIX = "harbor:"
REPEATS = 3  # identical tool errors in a row, at the end, that make a dead tool
_ERROR_LINE = re.compile(
    r"^(?i:error|fatal)\b|^Traceback \(most recent call last\)|^[\w.]*(?:Error|Exception):"
    r"|: command not found$|: No such file or directory$|: Permission denied$")



# ---- reading one trial folder ------------------------------------------------------------

def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _load_result(path: Path) -> dict[str, Any] | None:
    """A trial's result.json through Harbor's TrialResult when it validates, else as it is; None for a Harbor job's
    result.json (`JobResult`, which each cell folder of an Amber Job holds) or no JSON object."""
    from harbor.models.trial.result import TrialResult
    from pydantic import ValidationError

    raw = read_json(path)
    if not isinstance(raw, dict) or "n_total_trials" in raw:  # a job's result (an Amber cell's folder): no trial
        return None
    try:
        return TrialResult.model_validate(raw).model_dump(mode="json")
    except ValidationError:
        return raw


def timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)  # Harbor's trial times are UTC


def phase_seconds(phase: Any) -> float | None:
    start, end = timestamp(dig(phase, "started_at")), timestamp(dig(phase, "finished_at"))
    return (end - start).total_seconds() if start and end else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _rewards(result: dict[str, Any]) -> dict[str, float] | None:
    rewards = dig(result, "verifier_result", "rewards")
    if not isinstance(rewards, dict):
        return None
    numeric = {k: v for k, v in ((k, _number(v)) for k, v in rewards.items()) if v is not None}
    return numeric or None


def _reward(rewards: dict[str, float] | None) -> float | None:
    if not rewards:
        return None
    return rewards["reward"] if "reward" in rewards else rewards[sorted(rewards)[0]]


def _exception(result: dict[str, Any]) -> dict[str, Any] | None:
    """The exception that decides, as `outcomes.from_harbor` picks it."""
    steps = result.get("step_results") or []
    infos = [result.get("exception_info"), *(dig(s, "exception_info") for s in steps)]
    infos = [i for i in infos if isinstance(i, dict) and isinstance(i.get("exception_type"), str)]
    agents_own = outcomes.AGENT_CAUSES
    return next((i for i in infos if outcomes.rule_for(i["exception_type"]).cause not in agents_own),
                infos[0] if infos else None)


def _usage(result: dict[str, Any]) -> tuple[int | None, int | None, float | None]:
    """Input tokens, output tokens, cost: the agent's, else summed over multi-step results."""
    found = [result.get("agent_result")] if result.get("agent_result") else [
        dig(s, "agent_result") for s in result.get("step_results") or []]
    contexts: list[dict[str, Any]] = [c for c in found if isinstance(c, dict)]

    def total(key: str) -> Any:
        values = [c[key] for c in contexts if _number(c.get(key)) is not None]
        return sum(values) if values else None

    tokens_in, tokens_out, cost = total("n_input_tokens"), total("n_output_tokens"), total("cost_usd")
    return (None if tokens_in is None else int(tokens_in), None if tokens_out is None else int(tokens_out),
            None if cost is None else float(cost))


def _agent_timeout(result: dict[str, Any]) -> float | None:
    config = result.get("config") or {}
    agent = dig(config, "agent") or {}
    base = _number(agent.get("override_timeout_sec")) or _task_timeout(dig(config, "task", "path"))
    if not base:
        return None
    cap = _number(agent.get("max_timeout_sec"))
    multiplier = (_number(config.get("agent_timeout_multiplier")) or _number(config.get("timeout_multiplier"))
                  or 1.0)
    return (min(base, cap) if cap else base) * multiplier


def _task_timeout(task_path: Any) -> float | None:
    if not isinstance(task_path, str):
        return None
    try:
        toml = tomllib.loads((Path(task_path) / "task.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return _number(dig(toml, "agent", "timeout_sec"))


def _ctrf(trial_dir: Path) -> tuple[int | None, int | None]:
    summary = dig(read_json(trial_dir / "verifier" / "ctrf.json"), "results", "summary")
    passed, tests = dig(summary, "passed"), dig(summary, "tests")
    if not isinstance(passed, int) or not isinstance(tests, int):
        return None, None
    return passed, tests


# ---- the trajectory ------------------------------------------------------------------------

def atif_trajectory(trial_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The ATIF agent and steps of agent/trajectory.json, following continuation files."""
    path = trial_dir / "agent" / "trajectory.json"
    agent: Any = None
    steps: list[dict[str, Any]] = []
    seen: set[Path] = set()
    while path not in seen and isinstance(data := read_json(path), dict):
        seen.add(path)
        agent = agent or data.get("agent")
        steps += [s for s in data.get("steps") or [] if isinstance(s, dict) and not s.get("is_copied_context")]
        ref = data.get("continued_trajectory_ref")
        if not isinstance(ref, str):
            break
        path = path.parent / ref
    if not seen:
        return None
    return (agent if isinstance(agent, dict) else {}), steps


def message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def _error_lines(text: str) -> str:
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if _ERROR_LINE.search(line))


def _flagged(item: Any) -> bool:
    extra = dig(item, "extra")
    return isinstance(extra, dict) and any(bool(extra.get(k)) for k in ("error", "is_error"))


def _results(step: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in dig(step, "observation", "results") or [] if isinstance(r, dict)]


def _ended_with_error(last: dict[str, Any] | None) -> bool:
    if last is None:
        return False
    return _flagged(last) or any(_flagged(r) or _error_lines(message_text(r.get("content"))) for r in _results(last))


def _repeated_tool_error(agent_steps: Iterable[dict[str, Any]]) -> bool:
    tool_outputs = [_error_lines(message_text(r.get("content"))) for s in agent_steps for r in _results(s)
                    if r.get("source_call_id")]
    tail = tool_outputs[-REPEATS:]
    return len(tail) == REPEATS and bool(tail[0]) and all(t == tail[0] for t in tail)


def _same_model(a: str, b: str) -> bool:
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


@dataclasses.dataclass(frozen=True)
class _Files:
    """What a trial folder says beyond the outcome."""

    agent_duration_sec: float | None = None
    agent_timeout_sec: float | None = None
    model_used: bool | None = None
    trajectory_steps: int | None = None
    trajectory_ended_with_error: bool = False
    repeated_tool_error: bool = False
    tests_passed: int | None = None
    tests_total: int | None = None


NO_FOLDER = dataclasses.asdict(_Files())  # what a Trial without a folder (a static Trial's) adds: nothing


def trial_facts(trial_dir: Path) -> dict[str, Any]:
    """What an Amber Trial's folder adds to its Trial row: the trajectory, timing and test fields of evidence."""
    return dataclasses.asdict(_files(trial_dir, _load_result(trial_dir / "result.json") or {}))


def _files(trial_dir: Path, result: dict[str, Any]) -> _Files:
    passed, total = _ctrf(trial_dir)
    files = _Files(agent_duration_sec=phase_seconds(result.get("agent_execution")),
                   agent_timeout_sec=_agent_timeout(result), tests_passed=passed, tests_total=total)
    trajectory = atif_trajectory(trial_dir)
    if trajectory is None:
        return files
    agent, steps = trajectory
    agent_steps = [s for s in steps if s.get("source") == "agent"]
    configured = dig(result, "config", "agent", "model_name")
    names = [s.get("model_name") or agent.get("model_name") for s in agent_steps]
    used = (any(isinstance(n, str) and _same_model(n, configured) for n in names)
            if isinstance(configured, str) else None)
    return dataclasses.replace(
        files, model_used=used, trajectory_steps=len(agent_steps),
        trajectory_ended_with_error=_ended_with_error(agent_steps[-1] if agent_steps else None),
        repeated_tool_error=_repeated_tool_error(agent_steps))


# ---- Harbor job folders ----------------------------------------------------------------------

class NoHarborFolder(AmberError):
    """No Harbor job folder at a path, or none the Workspace may read: the two read the same."""

    def __init__(self, path: Path | str):
        super().__init__(f"No Harbor job folder at {path}: give the folder `harbor run` wrote (jobs/<job name>).")


def job_folder(path: Path) -> Path:
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise NoHarborFolder(path)
    return folder


def _harbor_trial(source: str, trial_dir: Path) -> TrialEvidence | None:
    result = _load_result(trial_dir / "result.json")
    if result is None:
        return None
    exception = _exception(result)
    rewards = _rewards(result)
    outcome = outcomes.classify(exception_type=dig(exception, "exception_type"),
                                exception_message=dig(exception, "exception_message"),
                                rewards=rewards, private=False)
    tokens_in, tokens_out, cost = _usage(result)
    model = dig(result, "agent_info", "model_info", "name")
    return TrialEvidence(
        source=source, trial_name=str(result.get("trial_name") or trial_dir.name),
        task_name=str(result.get("task_name") or trial_dir.name.split("__")[0]),
        agent=str(dig(result, "agent_info", "name") or dig(result, "config", "agent", "name") or "unknown"),
        model=model if isinstance(model, str) else None, attempt=0, reward=_reward(rewards),
        errored=outcome.kind is outcomes.Kind.ERRORED, exception_type=dig(exception, "exception_type"),
        started_at=timestamp(result.get("started_at")), finished_at=timestamp(result.get("finished_at")),
        input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=cost, trial_dir=str(trial_dir),
        **dataclasses.asdict(_files(trial_dir, result)))


def _numbered(evidence: list[TrialEvidence]) -> list[TrialEvidence]:
    """Attempts 1.. in start order within (route, Task)."""
    never = datetime.max.replace(tzinfo=UTC)
    ordered = sorted(evidence, key=lambda e: (e.route, e.task_name, e.started_at or never, e.trial_name))
    counts: dict[tuple[str, str], int] = {}
    out = []
    for e in ordered:
        key = (e.route, e.task_name)
        counts[key] = counts.get(key, 0) + 1
        out.append(dataclasses.replace(e, attempt=counts[key]))
    return out


def read_harbor_folder(path: Path) -> list[TrialEvidence]:
    """The evidence of every finished trial of a Harbor job folder, as source "harbor:<folder name>"."""
    folder = job_folder(path)
    source = f"{HARBOR_PREFIX}{folder.name}"
    found = (_harbor_trial(source, d) for d in sorted(folder.iterdir())
             if d.is_dir() and (d / "result.json").is_file())
    return _numbered([e for e in found if e is not None])
