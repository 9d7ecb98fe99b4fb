"""The main report of a round: pass rates with intervals, why attempts failed, and the cells.

Implements sections 1-3 of ``evaluation-analysis.md`` on :class:`TrialEvidence`, so an Amber Job and
an imported Harbor job folder are analysed alike. The statistics come from ``statistics`` (Wilson,
cluster-robust, pass@k, pass^k, detectable change, kappa, alpha) and the scoring engine (each cell's
score with its bootstrap interval, and the paired comparisons, through ``scores.py``); this module only
chooses what is counted. Choices, each stated where it is made:

* A **case** is one Task of one route (Agent + Model Configuration) within one source (spec 4 pairs
  on the same). With one route a case is a Task. The round's numbers (rates, pass@k, outcomes,
  causes, near misses, labels) cover the routes with a model; routes without one (oracle and nop,
  Amber's bounds) are left out of them unless no route has a model. ``cells`` and ``totals`` cover
  every route.
* An undefined number (no scored Task, a one-Task interval) is ``None`` (JSON ``null``), never NaN.
* A **failed attempt** is every attempt that did not pass (outcome failed, errored or unscored):
  spec 3 gives each "one outcome and one cause", and its ``unscored`` cause needs attempts without
  a Verifier result, which are never scored.

The report holds numbers and names (sources, routes, Tasks, Trials) only: never a prompt, a message,
a log line or a credential, so it can be shared without the Trial folders (spec 6).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from amber_pipeline.analysis import scores as scores_of
from amber_pipeline.analysis import statistics as analysis_stats
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.scores import wall_time_sec
from amber_pipeline.analysis.statistics import defined
from amber_pipeline.errors import AmberError

CAUSES = ("dead_tools", "agent_errors", "agent_timeouts", "early_stops", "unscored", "other")  # precedence
EARLY_STOP_SHARE = 0.25  # spec 3: stopped by itself within 25% of its time limit
NEAR_MISS_SHARE = 0.8  # spec 3: the Verifier passed at least 80% of its tests
STABLE_LABELS = 30  # spec 3: under 30 labels the kappa is not stable
KAPPA_TRUST, KAPPA_USABLE = 0.6, 0.8
REPORT_KEYS = (
    "sources", "routes", "headline_routes", "n_trials", "pass_rate", "strict_pass_rate", "attempt_pass_rate",
    "detectable_change_points", "attempts_per_task", "pass_at_k", "pass_hat_k", "unstable_tasks",
    "unscored_model_tasks", "unattempted_tasks", "outcomes", "failure_causes", "near_misses", "cells", "comparisons",
    "totals", "missing_tasks", "metering_disagreements",
    "n_labels", "cohen_kappa", "krippendorff_alpha", "label_guidance", "label_disagreements", "labels_unmatched",
)
CELL_KEYS = ("source", "route", "agent", "model", "mean_reward", "ci95", "pass_rate", "strict_pass_rate",
             "cost_usd", "mean_duration_sec", "errored", "n_tasks", "n_trials")

Case = tuple[str, str, str]  # (source, route, Task)


def _rate(solved: int, n: int, rate: float, ci: tuple[float, float]) -> dict[str, Any]:
    """A rate in percent; ``percent`` and both ends of ``ci95`` are None when undefined (e.g. n == 0)."""
    return {"solved": solved, "n": n, "percent": defined(100.0 * rate),
            "ci95": [defined(100.0 * ci[0]), defined(100.0 * ci[1])]}


def wilson_rate(solved: int, n: int) -> dict[str, Any]:
    return _rate(solved, n, solved / n if n else math.nan, analysis_stats.wilson_interval(solved, n))


def outcome(e: TrialEvidence) -> str:
    """passed / failed (scored, Reward below 1) / errored (Amber's Errored) / unscored (spec 2's rule)."""
    if e.errored:
        return "errored"
    if not e.scored:
        return "unscored"
    return "passed" if e.passed else "failed"


def failure_cause(e: TrialEvidence, time_limit_sec: float | None = None) -> str:
    """The cause of a failed attempt (spec 3), first match in :data:`CAUSES` order.

    The time limit is ``time_limit_sec`` if given, else the evidence's own; without a limit or an
    agent duration an attempt cannot be an early stop.
    """
    if e.repeated_tool_error:
        return "dead_tools"
    if (e.exception_type is not None and not e.timed_out) or e.trajectory_ended_with_error:
        return "agent_errors"
    if e.timed_out:
        return "agent_timeouts"
    limit = time_limit_sec if time_limit_sec is not None else e.agent_timeout_sec
    if limit is not None and e.agent_duration_sec is not None and e.agent_duration_sec < EARLY_STOP_SHARE * limit:
        return "early_stops"
    if e.reward is None:
        return "unscored"
    return "other"


def label_guidance(kappa: float | None, n: int) -> str:
    """The spec 3 sentence for a kappa from n labels (under 30 first: then the value says nothing yet)."""
    if n == 0:
        return "No label names a failed attempt of this round, so the causes are unchecked."
    if n < STABLE_LABELS:
        return (f"Only {n} label{'' if n == 1 else 's'}: under {STABLE_LABELS} the kappa is not stable; "
                "label more failed attempts before judging the causes.")
    if kappa is None:
        return ("The kappa is undefined because rules and labels each gave one single cause; "
                "label a more varied set of failed attempts.")
    if kappa < KAPPA_TRUST:
        return f"Kappa {kappa:.2f} is below {KAPPA_TRUST}: do not trust the causes the rules give."
    if kappa < KAPPA_USABLE:
        return (f"Kappa {kappa:.2f} is from {KAPPA_TRUST} to {KAPPA_USABLE}: "
                "review the disagreements before using the causes.")
    return f"Kappa {kappa:.2f} is at least {KAPPA_USABLE}: the causes the rules give are usable."


def _case(e: TrialEvidence) -> Case:
    return (e.source, e.route, e.task_name)


def _latest_scored(attempts: Iterable[TrialEvidence]) -> TrialEvidence | None:
    """Each Task counts once, by its latest scored attempt (spec 2): highest attempt number, then start."""
    scored = [e for e in attempts if e.scored]
    return max(scored, key=lambda e: (e.attempt, e.started_at is not None, e.started_at or 0)) if scored else None


def _pass_rates(cases: Mapping[Case, list[TrialEvidence]], n_all: int) -> tuple[dict, dict, dict, list]:
    latest = {c: _latest_scored(es) for c, es in cases.items()}
    counted = [e for e in latest.values() if e is not None]
    solved = sum(e.passed for e in counted)
    per_case = [[e for e in es if e.scored] for es in cases.values()]
    solved_attempts = [sum(e.passed for e in es) for es in per_case]
    n_attempts = [len(es) for es in per_case]
    rate, ci = analysis_stats.cluster_robust_rate(solved_attempts, n_attempts)
    attempt = _rate(sum(solved_attempts), sum(n_attempts), rate, ci)
    return wilson_rate(solved, len(counted)), wilson_rate(solved, n_all), attempt, counted


def _headline(evidence: Sequence[TrialEvidence]) -> list[TrialEvidence]:
    with_model = [e for e in evidence if e.model is not None]
    return with_model or list(evidence)


def _group(evidence: Iterable[TrialEvidence], key: Any) -> dict:
    groups: dict[Any, list[TrialEvidence]] = defaultdict(list)
    for e in evidence:
        groups[key(e)].append(e)
    return dict(groups)


def _cells(evidence: Sequence[TrialEvidence], task_names: Sequence[str]) -> tuple[list[dict], list[dict]]:
    """Amber's cells and comparisons (the scoring engine's), with each cell's pass rates beside its score."""
    scores = scores_of.score_evidence(evidence)
    routes = _group(evidence, scores_of.cell_of)
    cells = []
    for c in scores.cells:
        es = routes[c.cell]
        rate, strict, _, _ = _pass_rates(_group(es, _case), len(task_names))
        cells.append({
            "source": c.scope, "route": es[0].route, "agent": c.agent, "model": c.model,
            "mean_reward": defined(c.mean), "ci95": [defined(c.ci95.low), defined(c.ci95.high)],
            "pass_rate": rate, "strict_pass_rate": strict, "cost_usd": c.cost_usd,
            "mean_duration_sec": defined(c.mean_duration_sec), "errored": c.errored, "n_tasks": c.n_tasks,
            "n_trials": c.n_trials,
        })
    comparisons = [{
        "better": routes[c.better.cell][0].route, "worse": routes[c.worse.cell][0].route,
        "mean_difference": defined(c.difference.mean),
        "ci95": [defined(c.difference.ci95.low), defined(c.difference.ci95.high)],
        "n_shared_tasks": c.difference.n_shared_tasks, "too_close_to_call": c.difference.too_close_to_call,
    } for c in scores.comparisons]
    return cells, comparisons


def _labels(failed: list[tuple[TrialEvidence, str]], labels: Mapping[str, str]) -> dict[str, Any]:
    unknown = sorted({c for c in labels.values() if c not in CAUSES})
    if unknown:
        raise AmberError(f"The labels give the cause {unknown[0]!r}, which is not one of {', '.join(CAUSES)}: "
                         "fix labels.json.")
    pairs = [(e.trial_name, rule, labels[e.trial_name]) for e, rule in failed if e.trial_name in labels]
    rules, given = [r for _, r, _ in pairs], [g for _, _, g in pairs]
    kappa = defined(analysis_stats.cohen_kappa(rules, given))
    return {
        "n_labels": len(pairs), "cohen_kappa": kappa,
        "krippendorff_alpha": defined(analysis_stats.krippendorff_alpha_nominal(list(zip(rules, given, strict=True)))),
        "label_guidance": label_guidance(kappa, len(pairs)),
        "label_disagreements": [{"trial": t, "rule": r, "label": g} for t, r, g in sorted(pairs) if r != g],
        "labels_unmatched": len(set(labels) - {e.trial_name for e, _ in failed}),
    }


def build_report(evidence: list[TrialEvidence], *, all_tasks: list[str] | None = None,
                 task_time_limits: dict[str, float] | None = None,
                 labels: dict[str, str] | None = None,
                 missing_tasks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The round as a JSON-ready dict (keys in :data:`REPORT_KEYS`; no NaN anywhere, ``None`` instead).

    ``all_tasks``: every Task of the Benchmark Version, for the strict pass rate (default: the Tasks
    seen in the evidence). ``task_time_limits``: agent time limits by Task, else each attempt's own.
    ``labels``: trial name -> cause, to check the causes (spec 3). ``missing_tasks``: for an Amber Job
    that stopped early, its cells' Tasks still without a scored Trial and the estimate to finish them
    (`quotes.MissingCell.as_json`), kept as ``missing_tasks``. Raises :class:`AmberError` when
    there is no evidence, when the evidence names a Task outside ``all_tasks``, or on an unknown cause.
    """
    if not evidence:
        raise AmberError("The source has no Trials: give an Amber Job or a Harbor job folder with finished Trials.")
    seen_tasks = sorted({e.task_name for e in evidence})
    if all_tasks is not None:
        outside = [t for t in seen_tasks if t not in set(all_tasks)]
        if outside:
            raise AmberError(f"Task {outside[0]} of the Trials is not among the given Tasks: give the Benchmark "
                             "folder the round ran on.")
    task_names = sorted(set(all_tasks)) if all_tasks is not None else seen_tasks
    limits = task_time_limits or {}

    round_ = _headline(evidence)
    cases = _group(round_, _case)
    cells_of_round = sorted({(s, r) for s, r, _ in cases})
    pass_rate, strict, attempt, counted = _pass_rates(cases, len(task_names) * len(cells_of_round))
    pairs = {c: (sum(e.scored for e in es), sum(e.scored and e.passed for e in es)) for c, es in cases.items()}
    scored_pairs = [p for p in pairs.values() if p[0] > 0]
    k_max = min((n for n, _ in scored_pairs), default=0)
    rate = pass_rate["solved"] / pass_rate["n"] if pass_rate["n"] else math.nan
    detectable = analysis_stats.detectable_change_points(rate, pass_rate["n"]) if pass_rate["n"] else math.nan

    failed = [(e, failure_cause(e, limits.get(e.task_name))) for e in round_ if outcome(e) != "passed"]
    by_cause: dict[str, set[str]] = defaultdict(set)
    for e, cause in failed:
        by_cause[cause].add(e.task_name)
    counts = Counter(cause for _, cause in failed)
    causes = [{"cause": c, "count": counts[c], "tasks": sorted(by_cause[c])}
              for c in sorted(counts, key=lambda c: (-counts[c], CAUSES.index(c)))]
    near = [{"task": e.task_name, "route": e.route, "source": e.source, "trial": e.trial_name,
             "tests_passed": e.tests_passed, "tests_total": e.tests_total,
             "fraction": e.tests_passed / e.tests_total}
            for e in counted if not e.passed and e.tests_total and e.tests_passed is not None
            and e.tests_passed >= NEAR_MISS_SHARE * e.tests_total]

    cells, comparisons = _cells(evidence, task_names)
    report: dict[str, Any] = {
        "sources": sorted({e.source for e in evidence}),
        "routes": sorted({e.route for e in evidence}),
        "headline_routes": sorted({r for _, r in cells_of_round}),
        "n_trials": len(round_),
        "pass_rate": pass_rate, "strict_pass_rate": strict, "attempt_pass_rate": attempt,
        "detectable_change_points": defined(detectable),
        "attempts_per_task": k_max,
        "pass_at_k": {str(k): 100.0 * analysis_stats.mean_pass_at_k(scored_pairs, k) for k in range(1, k_max + 1)},
        "pass_hat_k": {str(k): 100.0 * analysis_stats.mean_pass_hat_k(scored_pairs, k) for k in range(1, k_max + 1)},
        "unstable_tasks": sorted({c[2] for c, (n, s) in pairs.items() if 0 < s < n}),
        "unscored_model_tasks": sorted({c[2] for c, (n, _) in pairs.items() if n == 0}),
        "unattempted_tasks": sorted(set(task_names) - {c[2] for c in cases}),
        "outcomes": {k: sum(outcome(e) == k for e in round_) for k in ("passed", "failed", "errored", "unscored")},
        "failure_causes": causes,
        "near_misses": sorted(near, key=lambda m: (-m["fraction"], m["task"], m["route"])),
        "cells": cells,
        "comparisons": comparisons,
        "totals": {
            "input_tokens": sum(e.input_tokens or 0 for e in evidence),
            "output_tokens": sum(e.output_tokens or 0 for e in evidence),
            "cost_usd": math.fsum(e.cost_usd or 0.0 for e in evidence),
            "duration_sec": math.fsum(d for d in map(wall_time_sec, evidence) if d is not None),
            "trials": len(evidence),
        },
    }
    if labels is not None:
        report.update(_labels(failed, labels))
    if missing_tasks is not None:
        report["missing_tasks"] = missing_tasks
    return report


# ---------------------------------------------------------------- text


def _p(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _names(names: Sequence[str], most: int = 12) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _rate_line(title: str, r: Mapping[str, Any], unit: str, method: str) -> str:
    low, high = r["ci95"]
    return (f"  {title:<18} {r['solved']:>4}/{r['n']:<4} {unit:<8} {_p(r['percent']):>6}%   "
            f"95% CI [{_p(low)}, {_p(high)}]  {method}")


def render_text(report: Mapping[str, Any]) -> str:
    """The round for a terminal, plain text. It reads only the keys in :data:`REPORT_KEYS` and
    :data:`CELL_KEYS` (and the fixed fields of rates, causes and near misses), all numbers and names."""
    bounds = sorted(set(report["routes"]) - set(report["headline_routes"]))
    outcomes = ", ".join(f"{n} {k}" for k, n in report["outcomes"].items())
    lines = [f"Round: {', '.join(report['sources'])}",
             f"  routes: {', '.join(report['headline_routes'])}"
             + (f" (bounds, in the cells only: {', '.join(bounds)})" if bounds else ""),
             f"  attempts: {report['n_trials']} ({outcomes})",
             "", "Pass rates (each Task once, by its latest scored attempt)",
             _rate_line("pass rate", report["pass_rate"], "Tasks", "Wilson"),
             _rate_line("strict pass rate", report["strict_pass_rate"], "Tasks", "Wilson, unscored = failed"),
             _rate_line("attempt pass rate", report["attempt_pass_rate"], "attempts", "cluster-robust by Task")]
    d = report["detectable_change_points"]
    lines.append("  detectable change: " + (
        f"{d:.1f} points for a second round of {report['pass_rate']['n']} other Tasks (80% power, alpha 0.05)"
        if d is not None else "none (too few scored Tasks)"))
    if report["pass_at_k"]:
        lines += ["", f"Over {report['attempts_per_task']} attempts per Task",
                  "  pass@k  " + "  ".join(f"k={k}: {_p(v)}%" for k, v in report["pass_at_k"].items()),
                  "  pass^k  " + "  ".join(f"k={k}: {_p(v)}%" for k, v in report["pass_hat_k"].items())]
    if report["failure_causes"]:
        lines += ["", "Why attempts failed"]
        lines += [f"  {c['cause']:<15} {c['count']:>4}  {_names(c['tasks'])}" for c in report["failure_causes"]]
    if "n_labels" in report:
        lines += ["", f"Causes checked against {report['n_labels']} labels: kappa {_p(report['cohen_kappa'], 2)}, "
                      f"Krippendorff's alpha {_p(report['krippendorff_alpha'], 2)}",
                  f"  {report['label_guidance']}"]
        lines += [f"  {x['trial']}: rule {x['rule']}, label {x['label']}" for x in report["label_disagreements"][:12]]
    lines += ["", "Read first"]
    lines += [f"  near miss: {m['task']} ({m['route']}) passed {m['tests_passed']}/{m['tests_total']} tests"
              for m in report["near_misses"]] or ["  no near miss"]
    for title, key in (("unstable Tasks (solved and failed)", "unstable_tasks"),
                       ("Tasks with no scored attempt", "unscored_model_tasks"),
                       ("Tasks never attempted", "unattempted_tasks")):
        if report[key]:
            lines.append(f"  {title}: {_names(report[key])}")
    lines += ["", *render_cells(report), *render_metering(report)]
    t = report["totals"]
    lines += ["", f"Totals: {t['trials']} Trials, {t['input_tokens']} input and {t['output_tokens']} output tokens, "
                  f"{t['cost_usd']:.4f} USD, {t['duration_sec']:.1f} s of Trial time"]
    return "\n".join(lines) + "\n"


def render_cells(report: Mapping[str, Any]) -> list[str]:
    """The report's cells and Amber's paired comparisons, as lines (what `amber results` prints)."""
    lines = ["Cells (mean Reward per Task over non-Errored Trials, then across Tasks; Errored apart)",
              f"  {'cell':<40} {'Tasks':>5} {'Trials':>6} {'mean Reward':>11} {'95% CI':>16} "
                  f"{'pass rate':>9} {'cost (USD)':>10} {'mean dur.':>9} {'Errored':>7}"]
    several = len(report["sources"]) > 1
    for c in report["cells"]:
        low, high = c["ci95"]
        name = f"{c['source']}: {c['route']}" if several else c["route"]
        lines.append(f"  {name:<40} {c['n_tasks']:>5} {c['n_trials']:>6} {_p(c['mean_reward'], 3):>11} "
                     f"{'[' + _p(low, 3) + ', ' + _p(high, 3) + ']':>16} {_p(c['pass_rate']['percent']):>8}% "
                     f"{c['cost_usd']:>10.4f} {_p(c['mean_duration_sec']):>7} s {c['errored']:>7}")
    for c in report.get("comparisons", []):
        low, high = c["ci95"]
        verdict = "too close to call" if c["too_close_to_call"] else f"{c['better']} is better"
        lines.append(f"  {c['better']} vs {c['worse']}: mean Reward difference {_p(c['mean_difference'], 3)}, "
                     f"95% CI [{_p(low, 3)}, {_p(high, 3)}] over {c['n_shared_tasks']} shared Tasks: {verdict}")
    return lines + render_missing(report)


def render_metering(report: Mapping[str, Any]) -> list[str]:
    """Where an Agent's own token count disagrees with what the model proxy metered (the proxy's is charged)."""
    found = report.get("metering_disagreements") or []
    if not found:
        return []
    lines = ["", "Metered by the model proxy (and charged) vs the Agent's own count"]
    lines += [f"  {m['route']}: input {m['metered_input']:,} metered, {m['agent_input']:,} by the Agent; "
              f"output {m['metered_output']:,} metered, {m['agent_output']:,} by the Agent" for m in found]
    return lines


def render_missing(report: Mapping[str, Any]) -> list[str]:
    """The Tasks a Job that stopped early left without a scored Trial, per cell, with the estimate to finish
    them (none when the report has no ``missing_tasks``, or they are empty)."""
    missing = report.get("missing_tasks") or []
    if not missing:
        return []
    total = math.fsum(m["cost_usd"] for m in missing)
    lines = ["", f"Missing Tasks (the Job stopped before scoring them; finishing them is estimated at "
                 f"{total:.6f} USD)"]
    for m in missing:
        tasks = m["tasks"]
        lines.append(f"  {m['route']}: {len(tasks)} Task{'' if len(tasks) == 1 else 's'}, "
                     f"{sum(t['trials'] for t in tasks)} Trials, {m['cost_usd']:.6f} USD to finish: "
                     + _names([t["task"] for t in tasks]))
    return lines
