"""A round's report as plain text for a terminal: the whole report (`amber report`), and the cells, comparisons,
metering and missing Tasks of a Job (`amber results`).

Apart from `report.py` so that computing a report and showing it change apart: the server returns the report
itself, and only the CLI prints it. Everything shown is a number or a name the report holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from amber_pipeline.analysis.report import (
    CellComparison,
    MeteringDisagreement,
    MissingTasks,
    Rate,
    ReportCell,
    RoundReport,
)
from amber_pipeline.jobs.decisions import Stopping


def _p(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _names(names: Sequence[str], most: int = 12) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _rate_line(title: str, r: Rate, unit: str, method: str) -> str:
    low, high = r.ci95
    return (f"  {title:<18} {r.solved:>4}/{r.n:<4} {unit:<8} {_p(r.percent):>6}%   "
            f"95% CI [{_p(low)}, {_p(high)}]  {method}")


def render_text(report: RoundReport) -> str:
    """The round for a terminal, plain text."""
    bounds = sorted(set(report.routes) - set(report.headline_routes))
    outcomes = ", ".join(f"{n} {k}" for k, n in dict(report.outcomes).items())
    lines = [f"Round: {', '.join(report.sources)}",
             f"  routes: {', '.join(report.headline_routes)}"
             + (f" (bounds, in the cells only: {', '.join(bounds)})" if bounds else ""),
             f"  attempts: {report.n_trials} ({outcomes})",
             "", "Pass rates (each Task once, by its latest scored attempt)",
             _rate_line("pass rate", report.pass_rate, "Tasks", "Wilson"),
             _rate_line("strict pass rate", report.strict_pass_rate, "Tasks", "Wilson, unscored = failed"),
             _rate_line("attempt pass rate", report.attempt_pass_rate, "attempts", "cluster-robust by Task")]
    d = report.detectable_change_points
    lines.append("  detectable change: " + (
        f"{d:.1f} points for a second round of {report.pass_rate.n} other Tasks (80% power, alpha 0.05)"
        if d is not None else "none (too few scored Tasks)"))
    if report.pass_at_k:
        lines += ["", f"Over {report.attempts_per_task} attempts per Task",
                  "  pass@k  " + "  ".join(f"k={k}: {_p(v)}%" for k, v in report.pass_at_k.items()),
                  "  pass^k  " + "  ".join(f"k={k}: {_p(v)}%" for k, v in report.pass_hat_k.items())]
    if report.failure_causes:
        lines += ["", "Why attempts failed"]
        lines += [f"  {c.cause:<15} {c.count:>4}  {_names(c.tasks)}" for c in report.failure_causes]
    if report.n_labels is not None:
        lines += ["", f"Causes checked against {report.n_labels} labels: kappa {_p(report.cohen_kappa, 2)}, "
                      f"Krippendorff's alpha {_p(report.krippendorff_alpha, 2)}",
                  f"  {report.label_guidance}"]
        lines += [f"  {x.trial}: rule {x.rule}, label {x.label}" for x in (report.label_disagreements or [])[:12]]
    lines += ["", "Read first"]
    lines += [f"  near miss: {m.task} ({m.route}) passed {m.tests_passed}/{m.tests_total} tests"
              for m in report.near_misses] or ["  no near miss"]
    for title, tasks in (("unstable Tasks (solved and failed)", report.unstable_tasks),
                         ("Tasks with no scored attempt", report.unscored_model_tasks),
                         ("Tasks never attempted", report.unattempted_tasks)):
        if tasks:
            lines.append(f"  {title}: {_names(tasks)}")
    lines += ["", *render_cells(report.cells, report.comparisons, report.missing_tasks),
              *render_stopping(report.stopping), *render_metering(report.metering_disagreements)]
    t = report.totals
    lines += ["", f"Totals: {t.trials} Trials, {t.input_tokens} input and {t.output_tokens} output tokens, "
                  f"{t.cost_usd:.4f} USD, {t.duration_sec:.1f} s of Trial time"]
    return "\n".join(lines) + "\n"


def render_cells(cells: Sequence[ReportCell], comparisons: Sequence[CellComparison],
                 missing: Sequence[MissingTasks] | None = None) -> list[str]:
    """The cells and Amber's paired comparisons, then any missing Tasks, as lines (what `amber results` prints).
    A cell is named by its route, and by its source too when the cells come from several."""
    lines = ["Cells (mean Reward per Task over non-Errored Trials, then across Tasks; Errored apart)",
             f"  {'cell':<40} {'Tasks':>5} {'Trials':>6} {'mean Reward':>11} {'95% CI':>16} "
             f"{'pass rate':>9} {'cost (USD)':>10} {'mean dur.':>9} {'Errored':>7}"]
    several = len({c.source for c in cells}) > 1
    for c in cells:
        low, high = c.ci95
        name = (f"{c.source}: {c.route}" if several else c.route) + (" (partial)" if c.partial else "")
        lines.append(f"  {name:<40} {c.n_tasks:>5} {c.n_trials:>6} {_p(c.mean_reward, 3):>11} "
                     f"{'[' + _p(low, 3) + ', ' + _p(high, 3) + ']':>16} {_p(c.pass_rate.percent):>8}% "
                     f"{c.cost_usd:>10.4f} {_p(c.mean_duration_sec):>7} s {c.errored:>7}")
    if any(c.partial for c in cells):
        lines.append("  (partial): the Job stopped once decided, and the cell ran only the Tasks before the stop, "
                     "a random sample of the Version's: its numbers cover those Tasks")
    for d in comparisons:
        low, high = d.ci95
        verdict = "too close to call" if d.too_close_to_call else f"{d.better} is better"
        lines.append(f"  {d.better} vs {d.worse}: mean Reward difference {_p(d.mean_difference, 3)}, "
                     f"95% CI [{_p(low, 3)}, {_p(high, 3)}] over {d.n_shared_tasks} shared Tasks: {verdict}")
    return lines + render_missing(missing)


def render_stopping(stopping: Stopping | None) -> list[str]:
    """A Job run with stop_when_decided: each comparison's anytime-valid interval and verdict (at the stop, or so
    far), and what stopping saved (none for any other Job)."""
    if stopping is None:
        return []
    d = stopping.decision
    confidence = f"{100 * (1 - d.alpha):.0f}%"
    margin = f", margin {d.margin_points:g} points" if d.margin_points else ""
    if stopping.stopped_early:
        head = f"Stopped early after {d.tasks_seen} of {d.tasks_total} Tasks: every comparison was decided"
    elif d.decided:
        head = f"Every comparison decided after {d.tasks_seen} of {d.tasks_total} Tasks"
    else:
        head = f"Not decided after {d.tasks_seen} of {d.tasks_total} Tasks"
    lines = ["", f"{head} (anytime-valid {confidence} intervals for the whole Benchmark Version, all comparisons "
                 f"together{margin})"]
    lines += [f"  {p.sentence()}" for p in d.pairs]
    saved = stopping.trials_saved
    lines.append(f"  Ran {stopping.trials_run} of {stopping.trials_planned} Trials ({saved} not run); charged "
                 f"{stopping.charged_usd:.6f} of {stopping.reserved_usd:.6f} USD reserved, "
                 f"{stopping.refunded_usd:.6f} USD refunded")
    return lines


def render_metering(found: Sequence[MeteringDisagreement] | None) -> list[str]:
    """Where an Agent's own token count disagrees with what the model proxy metered (the proxy's is charged)."""
    if not found:
        return []
    lines = ["", "Metered by the model proxy (and charged) vs the Agent's own count"]
    lines += [f"  {m.route}: input {m.metered_input:,} metered, {m.agent_input:,} by the Agent; "
              f"output {m.metered_output:,} metered, {m.agent_output:,} by the Agent" for m in found]
    return lines


def render_missing(missing: Sequence[MissingTasks] | None) -> list[str]:
    """The Tasks a Job that stopped early left without a scored Trial, per cell, with the estimate to finish
    them (none when there are none)."""
    if not missing:
        return []
    total = math.fsum(m.cost_usd for m in missing)
    lines = ["", f"Missing Tasks (the Job stopped before scoring them; finishing them is estimated at "
                 f"{total:.6f} USD)"]
    for m in missing:
        lines.append(f"  {m.route}: {len(m.tasks)} Task{'' if len(m.tasks) == 1 else 's'}, "
                     f"{sum(t.trials for t in m.tasks)} Trials, {m.cost_usd:.6f} USD to finish: "
                     + _names([t.task for t in m.tasks]))
    return lines
