"""`amber compare`, `amber leaderboard` and `amber plan`: the commands over :mod:`comparison`.

``register`` adds them to an app, given how the app finds the acting Workspace and how it loads a
source (an Amber Job id or a Harbor job folder) as ``TrialEvidence``. Percent everywhere on the
command line: ``--rate 60`` and ``--flip-share 10`` mean 60% and 10%; changes and margins are in
percentage points.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from amber_pipeline.cli import options
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.errors import AmberError

if TYPE_CHECKING:
    from amber_pipeline.analysis.compare import PairedCase, RoundComparison
    from amber_pipeline.analysis.statistics import Bounds

SHOWN_CASES = 10
app = typer.Typer()


def _pts(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1f}"


def _ci(ci: Bounds) -> str:
    return f"[{_pts(ci[0])}, {_pts(ci[1])}]"


def _money(x: float) -> str:
    from amber_pipeline.money.prices import show, usd

    return show(usd(x))


def _cases(label: str, cases: list[PairedCase], by_route: bool) -> str:
    names = [f"{c.task} ({c.route})" if by_route else c.task for c in cases[:SHOWN_CASES]]
    more = f" and {len(cases) - SHOWN_CASES} more" if len(cases) > SHOWN_CASES else ""
    return f"  {label} ({len(cases)}): {', '.join(names) or 'none'}{more}"


def _reward(x: float | None) -> str:
    return "n/a" if x is None else format(x, "+.3f")


def comparison_lines(baseline: str, candidate: str, r: RoundComparison) -> list[str]:
    """A comparison as plain lines, ending with the advice and the costs."""
    from amber_pipeline.analysis import compare as comparison

    how = "by Task and route" if r.pairing == comparison.BY_ROUTE else "by Task only"
    margin = f" (margin {r.margin_points:g} points)" if r.margin_points is not None else " (no margin)"
    q = f", Benjamini-Hochberg q = {r.q_value:.3g}" if r.q_value is not None else ""
    flip = r.detectable_change_points
    mrd = r.mean_reward_difference
    lines = [
        f"{candidate} vs {baseline}: {r.paired_cases} paired cases, paired {how}",
        f"  pass rate: baseline {r.baseline_rate_percent:.1f}%, candidate {r.candidate_rate_percent:.1f}%, "
        f"difference {_pts(r.difference_points)} points, 95% CI {_ci(r.difference_ci95)}",
        f"  verdict: {r.verdict}{margin}; exact McNemar p = {r.p_value:.3g}{q}",
        "  detectable change for paired rounds of this size: "
        + ("n/a" if flip is None else f"{flip:.1f} points")
        + f" ({r.flip_share_percent:.0f}% of results flipped)",
        f"  mean Reward difference: {_reward(mrd.mean)}, 95% CI [{_reward(mrd.ci95[0])}, {_reward(mrd.ci95[1])}] "
        f"over {mrd.n_shared_tasks} cases{': too close to call' if mrd.too_close_to_call else ''}",
    ]
    by_route = r.pairing == comparison.BY_ROUTE and len(r.routes.baseline) > 1
    lines += [_cases("improved", r.improved_cases, by_route), _cases("regressed", r.regressed_cases, by_route)]
    lines += [f"  caveat: {c}" for c in r.caveats]
    lines.append(f"  {r.advice}")
    lines.append(f"  Cost on the paired Tasks: baseline {_money(r.cost_usd.baseline)}, candidate "
                 f"{_money(r.cost_usd.candidate)}.")
    return lines


def _routes_per_side(route: list[str] | None, sides: int) -> list[str | None]:
    if not route:
        return [None] * sides
    if len(route) == 1:
        return [route[0]] * sides
    if len(route) != sides:
        raise AmberError(f"Give --route once for every side or once per side ({sides} here, baseline first), "
                         f"not {len(route)} times.")
    return [*route]


def _percent(value: float, name: str) -> float:
    if not 0.0 <= value <= 100.0:
        raise AmberError(f"{name} is a percent from 0 to 100, got {value:g}.")
    return value / 100.0


@app.command("compare")
def compare_cmd(
    ctx: typer.Context,
    baseline: Annotated[str, typer.Argument(help="The baseline: an Amber Job id or a Harbor job folder.")],
    candidates: Annotated[list[str], typer.Argument(help="One or more candidates, of the same kinds.")],
    margin_points: Annotated[float | None, typer.Option(
        "--margin-points", help="The margin in points (0 to 100], chosen before the runs.")] = None,
    route: Annotated[list[str] | None, typer.Option(
        "--route", help="Keep one route (agent/model): once for all sides, or once per side, baseline "
                        "first.")] = None,
    as_json: options.Json = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a forest plot of the differences (PNG), "
                                              "with zero and the margin marked.")] = None,
) -> None:
    """Compare candidates with a baseline on paired cases: interval, verdict, caveats, advice and costs."""
    from amber_pipeline.analysis import source_paths
    from amber_pipeline.analysis.compare import NamedComparison, NamedComparisons

    routes = _routes_per_side(route, 1 + len(candidates))
    c = Context.of(ctx)
    if plot is not None and c.remote is None:
        acting = c.acting(reads=True)
        source_paths.writable(acting.wh, acting.workspace, plot)
    names: list[str] = []
    for source, r in zip(candidates, routes[1:], strict=True):
        name = source if len(route or []) < 2 else f"{source} {r}"
        names.append(name if name not in names else f"{name} #{len(names) + 1}")
    base_name = baseline if len(route or []) < 2 else f"{baseline} {routes[0]}"
    found: NamedComparison | NamedComparisons = c.call(
        "compare", baseline=baseline, candidates=candidates, margin_points=margin_points, routes=routes, names=names,
        baseline_name=base_name)
    results = found.by_candidate()
    if plot is not None:
        from amber_pipeline.analysis import plot_rows, plots

        rows = [plots.Row(name, r.difference_points or math.nan, plot_rows.num(r.difference_ci95[0]),
                          plot_rows.num(r.difference_ci95[1])) for name, r in results.items()]
        plots.forest([], rows, plot, title=f"Candidate minus baseline ({base_name})", margin=margin_points,
                     difference_axis="difference in pass rate, points")
    if as_json:
        out.json(found.model_dump(mode="json"))
        return
    for i, (name, result) in enumerate(results.items()):
        if i:
            out.line()
        for line in comparison_lines(base_name, name, result):
            out.line(line)


@app.command("leaderboard")
def leaderboard_cmd(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="The round: an Amber Job id or a Harbor job folder.")],
    board: Annotated[Path, typer.Option("--board", help="A .csv or .json file of rows: agent, model, "
                                        "pass_rate (percent), trials_per_task.")],
    route: Annotated[str | None, typer.Option("--route", help="The route to place, when the round has "
                                              "several.")] = None,
    total_tasks: Annotated[int | None, typer.Option("--total-tasks", help="Tasks in the Benchmark Version, "
                                                    "for the strict pass rate.")] = None,
    as_json: options.Json = False,
) -> None:
    """Place a round on a public board by pass rate and strict pass rate, each as a range of ranks."""
    from amber_pipeline.analysis import leaderboard as board_of
    from amber_pipeline.analysis.leaderboard import NamedPlacing

    result: NamedPlacing = Context.of(ctx).call(
        "leaderboard", source=source, rows=[row.model_dump() for row in board_of.load_board(board)], route=route,
        total_tasks=total_tasks)
    if as_json:
        out.json(result.model_dump(mode="json"))
        return
    for label, rate, (lo, hi), (best, worst) in (
            ("pass rate", result.pass_rate_percent, result.pass_rate_ci95, result.pass_rate_rank),
            ("strict pass rate", result.strict_pass_rate_percent, result.strict_pass_rate_ci95,
             result.strict_pass_rate_rank)):
        shown = "n/a" if rate is None else f"{rate:.1f}% [{lo:.1f}, {hi:.1f}]"
        out.line(f"{result.source} ({result.route}): {label} {shown} -> rank {best} to {worst} of "
                 f"{result.positions}")
    out.table(["agent", "model", "pass rate", "Trials/Task"],
              ([row.agent, row.model, f"{row.pass_rate:.1f}%",
                "?" if row.trials_per_task is None else row.trials_per_task] for row in result.board),
              title="Board")
    for c in result.caveats:
        out.line(f"caveat: {c}")


@app.command("plan")
def plan_cmd(
    tasks: Annotated[int | None, typer.Option("--tasks", help="Tasks in the round.")] = None,
    attempts: Annotated[int, typer.Option("--attempts", help="Attempts per Task.")] = 1,
    rate: Annotated[float, typer.Option("--rate", help="Expected pass rate, percent (0-100).")] = 50.0,
    flip_share: Annotated[float, typer.Option(
        "--flip-share", help="Percent of results that flip between two runs on the same Tasks (0-100].")] = 10.0,
    change: Annotated[float | None, typer.Option(
        "--change", help="A change in points: how many Tasks it needs, and what a Job that stops once decided "
                         "spends at that true difference.")] = None,
    margin: Annotated[float, typer.Option(
        "--margin-points", help="The margin such a Job is decided with, in points (0: none).")] = 0.0,
    as_json: options.Json = False,
) -> None:
    """What a round can detect (80% power), and how many Tasks a change needs; rates in percent."""
    from amber_pipeline.analysis import plan as planning

    if tasks is None:
        raise AmberError("Give the number of Tasks in the round with --tasks N.")
    result = planning.plan(tasks, attempts, _percent(rate, "--rate"), _percent(flip_share, "--flip-share"), change,
                           margin)
    if as_json:
        out.json(result.model_dump(mode="json"))
        return
    same, other = result.detectable_change_points.same_tasks, result.detectable_change_points.other_tasks
    each = f"{attempts} attempt{'s' if attempts > 1 else ''} each"
    out.line(f"A round of {tasks} Tasks ({each}, {result.trials_per_side} Trials per side) "
             "detects, with 80% power at two-sided 5%:")
    out.line(f"  on the same Tasks, with {flip_share:g}% of results flipping: "
             + ("nothing" if same is None else f"a change of {same:.1f} points"))
    out.line(f"  on other Tasks, at a {rate:g}% pass rate: "
             + ("nothing" if other is None else f"a change of {other:.1f} points"))
    if (need := result.tasks_needed) is not None:
        out.line(f"A change of {change:g} points needs "
                 + ("no number of Tasks" if need.same_tasks is None else f"{need.same_tasks} Tasks")
                 + " on the same Tasks and "
                 + ("no number of Tasks" if need.other_tasks is None else f"{need.other_tasks} Tasks")
                 + " on other Tasks.")
    if (s := result.stopping) is not None:
        within = f" with a {s.margin_points:g}-point margin" if s.margin_points else ""
        out.line(f"A Job that stops once decided (--stop-when-decided{within}) runs a median "
                 f"{s.median_trials_share_percent:.0f}% of its Trials at a true difference of {change:g} points "
                 f"(mean {s.mean_trials_share_percent:.0f}%; of {s.jobs_simulated} simulated Jobs "
                 f"{s.decided_percent:.0f}% stopped early and {s.right_percent:.0f}% decided rightly).")
    for note in result.notes:
        out.line(f"note: {note}")