"""Reports: each cell's score with its bootstrap interval, and paired comparisons.

Computation lives in `stats.py`; this module turns Trial rows into the
records a person reads (per cell: mean Reward per Task then across Tasks,
95% CI over Tasks, cost, mean Trial duration, Errored apart) and renders them.
A report carries numbers and names only: no prompt, message or log line.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from rich.table import Table

from amber_pipeline.cells import NO_MODEL
from amber_pipeline.scoring import bootstrap as stats
from amber_pipeline.warehouse.schemas import TrialRecord


@dataclass(frozen=True)
class CellResult:
    cell_key: str
    agent: str
    model_configuration: str
    n_tasks: int
    n_trials: int
    score: stats.CellScore
    cost_usd: float
    mean_duration_sec: float
    errored: int
    task_means: dict[str, float]

    @property
    def label(self) -> str:
        if self.model_configuration == NO_MODEL:
            return self.agent
        return f"{self.agent} / {self.model_configuration}"


@dataclass(frozen=True)
class Comparison:
    better: str
    worse: str
    difference: stats.PairedDifference


def results_only(trials: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Trials that are results: scored or Errored. A Trial cancelled with its Job is neither."""
    return [t for t in trials if t.outcome != "cancelled"]


def cell_result(trials: list[TrialRecord]) -> CellResult:
    """Aggregate the Trials of one cell (results only). Errored Trials count apart, never in the mean."""
    first = trials[0]
    task_means = stats.per_task_means([t.task_name for t in trials], [t.reward for t in trials])
    return CellResult(
        cell_key=first.cell_key, agent=first.agent, model_configuration=first.model_configuration,
        n_tasks=len(task_means), n_trials=len(trials), score=stats.cell_score(task_means),
        cost_usd=sum(t.cost_usd for t in trials),
        mean_duration_sec=sum(t.duration_sec for t in trials) / len(trials),
        errored=sum(t.errored for t in trials), task_means=task_means)


def cell_results(trials: Iterable[TrialRecord]) -> list[CellResult]:
    by_cell: dict[str, list[TrialRecord]] = {}
    for t in results_only(trials):
        by_cell.setdefault(t.cell_key, []).append(t)
    results = [cell_result(ts) for ts in by_cell.values()]
    return sorted(results, key=lambda r: (-_or_minus_inf(r.score.mean), r.label))


def comparisons(results: list[CellResult]) -> list[Comparison]:
    """Paired comparisons of Model Configurations run with the same Agent, better one first."""
    out = []
    for a, b in itertools.combinations(results, 2):
        if a.agent != b.agent or NO_MODEL in (a.model_configuration, b.model_configuration):
            continue
        d = stats.paired_difference(a.task_means, b.task_means)
        if d.mean_difference < 0:
            a, b = b, a
            d = stats.paired_difference(a.task_means, b.task_means)
        out.append(Comparison(a.label, b.label, d))
    return out


def _or_minus_inf(x: float) -> float:
    return -math.inf if math.isnan(x) else x


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def cells_table(results: list[CellResult], title: str) -> Table:
    table = Table(title=title)
    for col in ("cell", "Tasks", "Trials", "mean Reward", "95% CI", "cost (USD)", "mean duration", "Errored"):
        table.add_column(col, justify="left" if col == "cell" else "right")
    for r in results:
        ci = r.score.ci95
        table.add_row(r.label, str(r.n_tasks), str(r.n_trials), _pct(r.score.mean),
                      f"[{_pct(ci.low)}, {_pct(ci.high)}]", f"{r.cost_usd:.4f}",
                      f"{r.mean_duration_sec:.1f} s", str(r.errored))
    return table


def comparison_lines(comps: list[Comparison]) -> list[str]:
    lines = []
    for c in comps:
        d = c.difference
        if d.n_shared_tasks == 0:
            lines.append(f"{c.better} vs {c.worse}: no shared Tasks, too close to call")
            continue
        verdict = "too close to call" if d.too_close_to_call else f"{c.better} is better"
        lines.append(f"{c.better} vs {c.worse}: difference {d.mean_difference:+.3f}, 95% CI "
                     f"[{d.ci95.low:+.3f}, {d.ci95.high:+.3f}] over {d.n_shared_tasks} shared Tasks: {verdict}")
    return lines


def to_json(results: list[CellResult], comps: list[Comparison]) -> dict:
    def nan_to_none(x: float) -> float | None:
        return None if math.isnan(x) else x

    return {
        "cells": [{
            "cell_key": r.cell_key, "agent": r.agent, "model_configuration": r.model_configuration,
            "n_tasks": r.n_tasks, "n_trials": r.n_trials, "mean_reward": nan_to_none(r.score.mean),
            "ci95": [nan_to_none(r.score.ci95.low), nan_to_none(r.score.ci95.high)],
            "cost_usd": r.cost_usd, "mean_duration_sec": r.mean_duration_sec, "errored": r.errored,
        } for r in results],
        "comparisons": [{
            "better": c.better, "worse": c.worse,
            "mean_difference": nan_to_none(c.difference.mean_difference),
            "ci95": [nan_to_none(c.difference.ci95.low), nan_to_none(c.difference.ci95.high)],
            "n_shared_tasks": c.difference.n_shared_tasks,
            "too_close_to_call": c.difference.too_close_to_call,
        } for c in comps],
    }

