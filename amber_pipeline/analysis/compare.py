"""Comparing two runs, placing a round on a public board, and planning a round.

Sections 4, 4b and 5 of ``evaluation-analysis.md``, on :class:`TrialEvidence` from any source. The
statistics are those of :mod:`analysis_stats` (Agresti-Min interval, exact McNemar, verdicts, advice,
Benjamini-Hochberg, rank ranges, power) and :mod:`stats` (Amber's paired bootstrap); this module only
pairs the evidence, calls them, and words the caveats. Results are plain dicts that ``json.dumps``
as they are: a NaN comes out as ``None``.

Pairing. A case is a (Task, route) pair scored on both sides; each side's outcome is its latest
scored attempt (see :func:`latest_scored`). When no case is shared (comparing two Model
Configurations: their routes differ by definition) cases are paired by Task only, which needs one
route per side, else an ``AmberError`` asks to pick one with ``--route``. Rates, the interval, the
mean Reward difference and the costs all cover the paired cases only.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from amber_pipeline.analysis import statistics as st
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.errors import AmberError
from amber_pipeline.scoring import bootstrap as stats

ALPHA = 0.05
POWER = 0.8
BY_ROUTE, BY_TASK = "task_and_route", "task"
Case = tuple[str, str]  # (Task, route)


# ---- pairing -----------------------------------------------------------------------------------

def _later(a: TrialEvidence, b: TrialEvidence) -> bool:
    """a is the later attempt: higher attempt number, then later start (the rule of analysis_report)."""
    if a.attempt != b.attempt:
        return a.attempt > b.attempt
    try:
        return a.started_at is not None and (b.started_at is None or a.started_at > b.started_at)
    except TypeError:  # one naive, one aware start: keep the first seen
        return False


def latest_scored(evidence: Sequence[TrialEvidence]) -> dict[Case, TrialEvidence]:
    """The latest scored attempt of each (Task, route); cases with no scored attempt are absent."""
    latest: dict[Case, TrialEvidence] = {}
    for e in evidence:
        key = (e.task_name, e.route)
        if e.scored and (key not in latest or _later(e, latest[key])):
            latest[key] = e
    return latest


def select_route(evidence: Sequence[TrialEvidence], route: str | None, side: str) -> list[TrialEvidence]:
    """The evidence of one route (all of it when route is None); an unknown route -> AmberError."""
    if route is None:
        return list(evidence)
    chosen = [e for e in evidence if e.route == route]
    if not chosen:
        known = ", ".join(sorted({e.route for e in evidence})) or "none"
        raise AmberError(f"The {side} has no Trial on route {route!r}: choose one of its routes ({known}).")
    return chosen


def _routes(cases: Collection[Case]) -> list[str]:
    return sorted({r for _, r in cases})


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else x


def _interval(lo_hi: tuple[float, float], scale: float = 100.0) -> list[float | None]:
    return [_finite(scale * lo_hi[0]), _finite(scale * lo_hi[1])]


def _cost(evidence: Sequence[TrialEvidence], cases: set[Case]) -> tuple[float, int]:
    """Total cost of every attempt (scored or not) on the cases, and how many attempts had no cost."""
    mine = [e for e in evidence if (e.task_name, e.route) in cases]
    return math.fsum(e.cost_usd or 0.0 for e in mine), sum(e.cost_usd is None for e in mine)


def _task_means(evidence: Sequence[TrialEvidence], case_key: Mapping[Case, str]) -> dict[str, float]:
    """Mean Reward per paired case over its non-Errored Trials (spec 1), keyed like the other side."""
    mine = [e for e in evidence if (e.task_name, e.route) in case_key]
    return stats.per_task_means([case_key[(e.task_name, e.route)] for e in mine],
                                [None if e.errored else e.reward for e in mine])


def _counts(pairs: Sequence[tuple[TrialEvidence, TrialEvidence]]) -> tuple[int, int, int]:
    improved = sum(not b.passed and c.passed for b, c in pairs)
    regressed = sum(b.passed and not c.passed for b, c in pairs)
    return improved, regressed, len(pairs)


def _pair(base: dict[Case, TrialEvidence], cand: dict[Case, TrialEvidence]) -> tuple[str, list[Case], list[Case]]:
    """The pairing and, in one order, the baseline's and the candidate's case of each pair."""
    shared = sorted(base.keys() & cand.keys())
    if shared:
        return BY_ROUTE, shared, shared
    b_routes, c_routes = _routes(base), _routes(cand)
    for side, routes in (("baseline", b_routes), ("candidate", c_routes)):
        if len(routes) > 1:
            raise AmberError(f"The sides share no route and the {side} has {len(routes)} ({', '.join(routes)}), "
                             "so cases can't be paired by Task: choose one route per side with --route.")
    tasks = sorted({t for t, _ in base} & {t for t, _ in cand})
    if not tasks:
        raise AmberError("The two sides have no scored Task in common: compare rounds over the same Tasks.")
    return BY_TASK, [(t, b_routes[0]) for t in tasks], [(t, c_routes[0]) for t in tasks]


def _side_caveats(base: list[TrialEvidence], cand: list[TrialEvidence], pairing: str,
                  b_cases: list[Case], c_cases: list[Case], unpaired: int, left_out: list[str]) -> list[str]:
    out = []
    if pairing == BY_TASK:
        out.append("The sides share no route (Agent + Model Configuration), so cases were paired by Task only.")
        b, c = base[0], cand[0]  # one route per side here
        agent, model = b.agent != c.agent, b.model != c.model
        if agent and model:
            out.append(f"The sides differ in both Agent and Model ({b.route} vs {c.route}), so the cause of a "
                       "difference can't be told.")
        elif agent:
            out.append(f"The sides differ in Agent ({b.agent} vs {c.agent}) with the same Model, so a difference "
                       "is the Agents'.")
        elif model:
            out.append(f"The sides differ in Model ({b.model} vs {c.model}) with the same Agent, so a difference "
                       "is the Models'.")
    if left_out:
        out.append(f"Routes found on one side only were left out of the pairing: {', '.join(left_out)}.")
    if unpaired:
        out.append(f"{unpaired} cases scored on one side only were left out of the pairing.")
    per_case = [len(side) / len(cases) for side, cases in ((base, b_cases), (cand, c_cases))]
    if not math.isclose(per_case[0], per_case[1]):
        out.append(f"The baseline ran {per_case[0]:.1f} attempts per paired case and the candidate "
                   f"{per_case[1]:.1f}, so their costs are not like for like.")
    return out


def _verdict_caveats(verdict: str, p: float, interval: tuple[float, float], margin: float | None) -> list[str]:
    out = []
    if verdict in ("better", "worse") and p >= ALPHA:
        out.append(f"The verdict is {verdict}, but the exact McNemar p = {p:.3g} is not below 0.05: likely, "
                   "not proved.")
    if margin is not None and verdict in ("better", "worse"):
        word, near, far, end = ("gain", interval[0], interval[1], "starts") if verdict == "better" else \
            ("loss", -interval[1], -interval[0], "ends")
        if far < margin:
            out.append(f"The {word} is smaller than the {margin:g}-point margin: the whole interval lies within "
                       f"{margin:g} points of zero.")
        elif near < margin:
            out.append(f"The {word} may be smaller than the {margin:g}-point margin: the interval {end} at "
                       f"{near if verdict == 'better' else -near:+.1f} points.")
    return out


# ---- comparisons -------------------------------------------------------------------------------

def compare(baseline: Sequence[TrialEvidence], candidate: Sequence[TrialEvidence], *,
            margin_points: float | None = None, route: str | None = None,
            candidate_route: str | None = None) -> dict[str, Any]:
    """Compare the candidate with the baseline on paired cases (spec 4 and 4b).

    ``route`` keeps one route on both sides; ``candidate_route`` (default: ``route``) overrides it on
    the candidate side, e.g. to compare two cells of one Job. Differences are candidate - baseline.
    """
    if margin_points is not None and not 0.0 < margin_points <= 100.0:
        raise AmberError(f"The margin must be above 0 and at most 100 points, got {margin_points:g}: choose it "
                         "before the runs.")
    base = select_route(baseline, route, "baseline")
    cand = select_route(candidate, candidate_route if candidate_route is not None else route, "candidate")
    b_out, c_out = latest_scored(base), latest_scored(cand)
    for side, out in (("baseline", b_out), ("candidate", c_out)):
        if not out:
            raise AmberError(f"The {side} has no scored Trial, so there is nothing to compare: check the source.")
    pairing, b_cases, c_cases = _pair(b_out, c_out)
    pairs = [(b_out[bk], c_out[ck]) for bk, ck in zip(b_cases, c_cases, strict=True)]
    labels = [bk if pairing == BY_ROUTE else (bk[0], f"{bk[1]} -> {ck[1]}")
              for bk, ck in zip(b_cases, c_cases, strict=True)]
    improved, regressed, n = _counts(pairs)
    diff = st.agresti_min_interval(improved, regressed, n)
    interval = (100.0 * diff[0], 100.0 * diff[1])
    verdict = st.verdict(interval, margin_points)
    p = st.mcnemar_exact_p(improved, regressed)
    flip = (improved + regressed) / n

    b_set, c_set = set(b_cases), set(c_cases)
    used_b, used_c = [e for e in base if (e.task_name, e.route) in b_set], \
        [e for e in cand if (e.task_name, e.route) in c_set]
    keys = [f"{t}\x1f{r}" for t, r in labels]
    mrd = stats.paired_difference(_task_means(cand, dict(zip(c_cases, keys, strict=True))),
                                  _task_means(base, dict(zip(b_cases, keys, strict=True))))
    cost_b, unknown_b = _cost(base, b_set)
    cost_c, unknown_c = _cost(cand, c_set)

    unpaired = len(b_out) + len(c_out) - 2 * n if pairing == BY_ROUTE else \
        len({t for t, _ in b_out} ^ {t for t, _ in c_out})
    left_out = sorted(set(_routes(b_out)) ^ set(_routes(c_out))) if pairing == BY_ROUTE else []
    caveats = _verdict_caveats(verdict, p, interval, margin_points)
    caveats += _side_caveats(used_b, used_c, pairing, b_cases, c_cases, unpaired, left_out)
    if unknown_b or unknown_c:
        caveats.append(f"{unknown_b + unknown_c} attempts on the paired cases have no known cost and count as $0, "
                       "so the cost comparison may be off.")
    if not improved + regressed:
        caveats.append("No paired result flipped, so the detectable change can't be estimated from this round.")
    per_route = []
    if pairing == BY_ROUTE:
        for r in _routes(b_cases):
            i, g, m = _counts([pair for pair, (_, pr) in zip(pairs, b_cases, strict=True) if pr == r])
            per_route.append({"route": r, "paired_cases": m, "improved": i, "regressed": g,
                              "difference_ci95": _interval(st.agresti_min_interval(i, g, m)),
                              "p_value": st.mcnemar_exact_p(i, g)})
    return {
        "baseline_rate_percent": 100.0 * sum(b.passed for b, _ in pairs) / n,
        "candidate_rate_percent": 100.0 * sum(c.passed for _, c in pairs) / n,
        "difference_points": 100.0 * (improved - regressed) / n,
        "difference_ci95": _interval(diff),
        "verdict": verdict,
        "p_value": p,
        "detectable_change_points": _finite(st.paired_detectable_change_points(n, flip, ALPHA, POWER)),
        "flip_share_percent": 100.0 * flip,
        "margin_points": margin_points,
        "caveats": caveats,
        "improved_cases": [{"task": t, "route": r} for (b, c), (t, r) in zip(pairs, labels, strict=True)
                           if c.passed and not b.passed],
        "regressed_cases": [{"task": t, "route": r} for (b, c), (t, r) in zip(pairs, labels, strict=True)
                            if b.passed and not c.passed],
        "paired_cases": n,
        "pairing": pairing,
        "routes": {"baseline": _routes(b_cases), "candidate": _routes(c_cases)},
        "per_route": per_route,
        "mean_reward_difference": {"mean": _finite(mrd.mean_difference),
                                   "ci95": [_finite(mrd.ci95.low), _finite(mrd.ci95.high)],
                                   "n_shared_tasks": mrd.n_shared_tasks, "too_close_to_call": mrd.too_close_to_call},
        "advice": st.advice(verdict, cost_b, cost_c, margin_points, interval),
        "cost_usd": {"baseline": cost_b, "candidate": cost_c},
    }


def compare_many(baseline: Sequence[TrialEvidence], candidates: Mapping[str, Sequence[TrialEvidence]],
                 margin_points: float | None = None, *, route: str | None = None,
                 candidate_routes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Each candidate against the baseline, with Benjamini-Hochberg q-values over their McNemar p-values."""
    if not candidates:
        raise AmberError("No candidate to compare: give at least one.")
    results = {name: compare(baseline, ev, margin_points=margin_points, route=route,
                             candidate_route=(candidate_routes or {}).get(name))
               for name, ev in candidates.items()}
    q_values = st.benjamini_hochberg([r["p_value"] for r in results.values()])
    for r, q in zip(results.values(), q_values, strict=True):
        r["q_value"] = q
        if r["verdict"] in ("better", "worse") and r["p_value"] < ALPHA <= q:
            r["caveats"].append(f"Among {len(results)} comparisons its Benjamini-Hochberg q = {q:.3g} is not below "
                                "0.05, so this finding may be one of chance.")
    return {"comparisons": results, "n_comparisons": len(results), "q_method": "Benjamini-Hochberg"}


# ---- leaderboard -------------------------------------------------------------------------------

BOARD_FIELDS = "agent, model, pass_rate (percent) and trials_per_task"


def _board_row(raw: Mapping[Any, Any], i: int, where: str) -> dict[str, Any]:
    if None in raw:
        raise AmberError(f"{where} row {i} has more fields than the header: fix the file.")
    row = {str(k).strip().lower(): v for k, v in raw.items()}
    for field in ("agent", "model", "pass_rate"):
        if field not in row or row[field] is None:
            raise AmberError(f"{where} row {i} has no {field}: every row needs {BOARD_FIELDS}.")
    agent, model = str(row["agent"]).strip(), str(row["model"]).strip()
    if not agent:
        raise AmberError(f"{where} row {i} has an empty agent: name the agent of every row.")
    text = str(row["pass_rate"]).strip().removesuffix("%")
    try:
        rate = float(text)
    except ValueError:
        rate = math.nan
    if isinstance(row["pass_rate"], bool) or not 0.0 <= rate <= 100.0:
        raise AmberError(f"{where} row {i} has pass_rate {row['pass_rate']!r}: give a percent from 0 to 100.")
    trials = row.get("trials_per_task")
    if trials is not None and str(trials).strip() != "":
        try:
            trials = int(str(trials).strip())
        except ValueError:
            trials = 0
        if trials < 1 or isinstance(row["trials_per_task"], bool | float):
            raise AmberError(f"{where} row {i} has trials_per_task {row['trials_per_task']!r}: give a whole "
                             "number of at least 1, or leave it empty.")
    else:
        trials = None
    return {"agent": agent, "model": model, "pass_rate": rate, "trials_per_task": trials}


def _board(rows: Sequence[Mapping[Any, Any]], where: str) -> list[dict[str, Any]]:
    if not rows:
        raise AmberError(f"{where} has no rows: give at least one row of {BOARD_FIELDS}.")
    board = [_board_row(r, i, where) for i, r in enumerate(rows, 1)]
    rates = [r["pass_rate"] for r in board]
    if max(rates) <= 1.0 and any(0.0 < x < 1.0 for x in rates):
        raise AmberError(f"{where} gives every pass_rate as at most 1: give percents (42.5), not proportions.")
    return board


def load_board(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a public board from a .csv (header row) or .json (a list of objects, or {"rows": [...]})."""
    p = Path(path)
    where = f"The board {p}"
    if p.suffix.lower() not in (".csv", ".json"):
        raise AmberError(f"{where} must be a .csv or .json file of rows of {BOARD_FIELDS}.")
    if not p.is_file():
        raise AmberError(f"No board file at {p}: give a .csv or .json file of rows of {BOARD_FIELDS}.")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise AmberError(f"{where} is not UTF-8 text: save it as UTF-8.") from None
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise AmberError(f"{where} is not valid JSON (line {e.lineno}, column {e.colno}): fix the file.") from None
        if isinstance(data, dict) and "rows" in data:
            data = data["rows"]
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise AmberError(f'{where} must hold a JSON list of row objects, or an object with a "rows" list.')
        return _board(data, where)
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""), skipinitialspace=True)
        rows = list(reader)
    except csv.Error as e:
        raise AmberError(f"{where} is not valid CSV ({e}): fix the file.") from None
    if not reader.fieldnames:
        raise AmberError(f"{where} is empty: give a header row naming {BOARD_FIELDS}.")
    return _board(rows, where)


def leaderboard(evidence: Sequence[TrialEvidence], board_rows: Sequence[Mapping[Any, Any]], *,
                all_tasks: Collection[str] | int | None = None, route: str | None = None) -> dict[str, Any]:
    """Place one round (one route) on a public board by pass rate and strict pass rate (spec 4b).

    Each rate gets its 95% Wilson interval (spec 2); its rank is a range from
    :func:`analysis_stats.rank_range` (1 = best, ties share the better rank). ``all_tasks``: the
    Benchmark Version's Task names, or their number; without it the strict pass rate counts only
    the Tasks this round attempted.
    """
    board = _board(board_rows, "The board")
    ev = select_route(evidence, route, "round")
    routes = sorted({e.route for e in ev})
    if not routes:
        raise AmberError("The round has no Trial, so there is nothing to place: check the source.")
    if len(routes) > 1:
        raise AmberError(f"The round has {len(routes)} routes ({', '.join(routes)}): place one at a time with "
                         "--route.")
    attempted = {e.task_name for e in ev}
    caveats = []
    if all_tasks is None:
        n_all = len(attempted)
        caveats.append(f"The Benchmark Version's Task list was not given, so the strict pass rate counts only the "
                       f"{n_all} Tasks this round attempted.")
    elif isinstance(all_tasks, int):
        n_all = all_tasks
        if n_all < len(attempted):
            raise AmberError(f"The round attempted {len(attempted)} Tasks, more than the {n_all} given as all Tasks: "
                             "give the Benchmark Version's Task count.")
    else:
        if extra := attempted - set(all_tasks):
            raise AmberError(f"The round attempted {len(extra)} Tasks outside the given Task list (e.g. "
                             f"{min(extra)}): give the Benchmark Version's Tasks.")
        n_all = len(set(all_tasks))
    outcomes = latest_scored(ev)
    scored, solved = len(outcomes), sum(e.passed for e in outcomes.values())
    pass_ci = st.wilson_interval(solved, scored)
    strict_ci = st.wilson_interval(solved, n_all)
    rates = [r["pass_rate"] for r in board]
    pass_rank = st.rank_range((100 * pass_ci[0], 100 * pass_ci[1]), rates)
    strict_rank = st.rank_range((100 * strict_ci[0], 100 * strict_ci[1]), rates)
    attempts = max(Counter(e.task_name for e in ev).values())
    more = [r for r in board if r["trials_per_task"] is not None and r["trials_per_task"] > attempts]
    if more:
        caveats.append(f"{len(more)} board rows ran more Trials per Task (up to "
                       f"{max(r['trials_per_task'] for r in more)}) than this round ({attempts}), so their rates "
                       "are less noisy and may average over attempts rather than count each Task once.")
    if unsaid := sum(r["trials_per_task"] is None for r in board):
        caveats.append(f"{unsaid} board rows do not say how many Trials per Task they ran.")
    caveats.append("The board's rates carry no intervals, so the ranks here treat them as exact although they "
                   "are uncertain too.")
    if scored < len(attempted):
        caveats.append(f"{len(attempted) - scored} attempted Tasks have no scored attempt: they are left out of the "
                       "pass rate and count as failed in the strict pass rate.")
    if scored == 0:
        caveats.append("No Task was scored, so the pass rate and its rank are unknown.")
    return {
        "route": routes[0], "scored_tasks": scored, "solved_tasks": solved, "all_tasks": n_all,
        "attempts_per_task": attempts,
        "pass_rate_percent": _finite(100 * solved / scored) if scored else None,
        "pass_rate_ci95": _interval(pass_ci),
        "pass_rate_rank": list(pass_rank),
        "strict_pass_rate_percent": 100 * solved / n_all if n_all else None,
        "strict_pass_rate_ci95": _interval(strict_ci),
        "strict_pass_rate_rank": list(strict_rank),
        "positions": len(board) + 1,
        "board": sorted(board, key=lambda r: -r["pass_rate"]),
        "caveats": caveats,
    }


# ---- planning ----------------------------------------------------------------------------------

def _check_plan(n_tasks: int, attempts: int, rate: float, flip_share: float, delta_points: float | None) -> None:
    if n_tasks < 1:
        raise AmberError(f"A round needs at least 1 Task, got {n_tasks}.")
    if attempts < 1:
        raise AmberError(f"Attempts per Task must be at least 1, got {attempts}.")
    if not 0.0 <= rate <= 1.0:
        raise AmberError(f"The pass rate must be from 0% to 100%, got {100 * rate:g}%.")
    if not 0.0 < flip_share <= 1.0:
        raise AmberError(f"The flip share must be above 0% and at most 100%, got {100 * flip_share:g}%.")
    if delta_points is not None and not 0.0 < delta_points <= 100.0:
        raise AmberError(f"The change must be above 0 and at most 100 points, got {delta_points:g}.")


def plan(n_tasks: int, attempts: int = 1, rate: float = 0.5, flip_share: float = 0.1,
         delta_points: float | None = None) -> dict[str, Any]:
    """What a round of ``n_tasks`` can detect, and how many Tasks a change of ``delta_points`` needs (spec 5).

    ``rate`` and ``flip_share`` are proportions (0..1). 80% power, two-sided alpha 0.05. Same Tasks:
    McNemar power given the share of results that flip (Connor 1987); other Tasks: two-proportion
    z-test at ``rate``. ``attempts`` does not enter the formulas: they count Tasks, one result each.
    """
    _check_plan(n_tasks, attempts, rate, flip_share, delta_points)
    same = st.paired_detectable_change_points(n_tasks, flip_share, ALPHA, POWER)
    other = st.detectable_change_points(rate, n_tasks, ALPHA, POWER)
    notes = [f"Attempts per Task ({attempts}) do not change these numbers: they count Tasks, one result per Task. "
             "More attempts narrow each Task's noise (and can lower the share of results that flip), but they do "
             f"not replace Tasks; {attempts} per Task make {n_tasks * attempts} Trials per side to pay for."]
    if math.isnan(same):
        notes.append(f"On the same Tasks with {100 * flip_share:g}% flips, {n_tasks} Tasks detect no change with "
                     "80% power.")
    if math.isnan(other):
        notes.append(f"On other Tasks at a {100 * rate:g}% pass rate, {n_tasks} Tasks detect no change with 80% power.")
    needed: dict[str, int | None] | None = None
    if delta_points is not None:
        needed = {"same_tasks": None, "other_tasks": None}
        if delta_points / 100 <= flip_share:
            needed["same_tasks"] = st.tasks_needed(delta_points, flip_share=flip_share, alpha=ALPHA, power=POWER)
        else:
            notes.append(f"A change of {delta_points:g} points can't happen on the same Tasks when only "
                         f"{100 * flip_share:g}% of results flip.")
        try:
            needed["other_tasks"] = st.tasks_needed(delta_points, rate=rate, alpha=ALPHA, power=POWER)
        except ValueError:
            notes.append(f"Neither a rise nor a fall of {delta_points:g} points fits from a {100 * rate:g}% pass rate.")
    return {
        "n_tasks": n_tasks, "attempts": attempts, "trials_per_side": n_tasks * attempts,
        "rate_percent": 100 * rate, "flip_share_percent": 100 * flip_share, "power": POWER, "alpha": ALPHA,
        "detectable_change_points": {"same_tasks": _finite(same), "other_tasks": _finite(other)},
        "change_points": delta_points,
        "tasks_needed": needed,
        "notes": notes,
    }


def quote_detectable_change(n_tasks: int, rate: float = 0.5) -> float:
    """Smallest change (points) a Job of ``n_tasks`` detects against a round on other Tasks (80% power).

    For a Quote, before any result: ``rate`` 0.5 is the worst case (largest variance), so the
    figure is conservative; paired cells of one Job, on the same Tasks, usually detect less. nan
    when nothing is detectable (a single Task).
    """
    return st.detectable_change_points(rate, n_tasks, ALPHA, POWER)


def detectable_change_sentence(n_tasks: int, rate: float = 0.5) -> str:
    """The sentence a Quote prints next to its price."""
    x = quote_detectable_change(n_tasks, rate) if n_tasks > 0 else math.nan
    if math.isnan(x):
        return f"With {n_tasks} Tasks this Job can't detect a change with 80% power: add Tasks."
    return (f"With {n_tasks} Tasks this Job detects a change of about {x:.0f} points or more (80% power, against "
            "a round on other Tasks; paired cells on the same Tasks detect less).")
