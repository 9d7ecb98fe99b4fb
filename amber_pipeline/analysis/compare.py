"""Comparing two runs on paired cases.

Section 4 of ``evaluation-analysis.md``, on :class:`TrialEvidence` from any source. The
statistics are those of :mod:`statistics` (Agresti-Min interval, exact McNemar, verdicts, advice,
Benjamini-Hochberg, power) and the scoring engine (Amber's paired bootstrap of the mean Reward); this
module only pairs the evidence, calls them, and words the caveats. A result is a :class:`RoundComparison`
(several: :class:`RoundComparisons`), with no NaN in it: an undefined number is ``None``.

Pairing. A case is a (Task, route) pair scored on both sides; each side's outcome is its latest
scored attempt (see :func:`latest_scored`). When no case is shared (comparing two Model
Configurations: their routes differ by definition) cases are paired by Task only, which needs one
route per side, else an ``AmberError`` asks to pick one with ``--route``. Rates, the interval, the
mean Reward difference and the costs all cover the paired cases only.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from amber_pipeline.analysis import statistics as st
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.plan import ALPHA, POWER
from amber_pipeline.analysis.report import absent, later
from amber_pipeline.analysis.scores import evidence_row, score_rows
from amber_pipeline.analysis.statistics import Bounds, Verdict
from amber_pipeline.errors import AmberError

if TYPE_CHECKING:  # the engine (NumPy, Arrow) is loaded by the first comparison, not by whoever reads its types
    from amber_pipeline.scoring.engine import PairedDifference

Pairing = Literal["task_and_route", "task"]
BY_ROUTE: Pairing = "task_and_route"
BY_TASK: Pairing = "task"
Case = tuple[str, str]  # (Task, route)


# ---- the records -------------------------------------------------------------------------------

class PairedCase(BaseModel):
    task: str
    route: str = Field(description="The route; paired by Task only, \"<baseline route> -> <candidate route>\".")


class RouteComparison(BaseModel):
    """The pairs of one route (when pairing by Task and route), tested on their own."""

    route: str
    paired_cases: int
    improved: int = Field(description="Cases failed by the baseline and passed by the candidate.")
    regressed: int = Field(description="Cases passed by the baseline and failed by the candidate.")
    difference_ci95: Bounds = Field(description="The 95% Agresti-Min interval of the difference, in points.")
    p_value: float = Field(description="The exact McNemar p-value.")


class SideRoutes(BaseModel):
    baseline: list[str]
    candidate: list[str]


class SideCosts(BaseModel):
    """Every attempt on the paired cases (scored or not), in USD; an unknown cost counts 0."""

    baseline: float
    candidate: float


class MeanRewardDifference(BaseModel):
    """Amber's paired bootstrap of the candidate's mean Reward minus the baseline's, over the paired cases."""

    mean: float | None
    ci95: Bounds
    n_shared_tasks: int
    too_close_to_call: bool = Field(description="The interval includes 0.")


class RoundComparison(BaseModel):
    """A candidate against the baseline on paired cases (spec 4 and 4b): rates, the difference with its interval,
    the verdict and its tests, caveats, the advice and the costs. Differences are candidate minus baseline, in
    percentage points; rates and costs cover the paired cases only."""

    baseline_rate_percent: float
    candidate_rate_percent: float
    difference_points: float
    difference_ci95: Bounds = Field(description="The 95% Agresti-Min interval of the difference, in points.")
    verdict: Verdict = Field(description="From the interval and the margin (spec 4).")
    p_value: float = Field(description="The exact McNemar p-value.")
    detectable_change_points: float | None = Field(description="The smallest change paired rounds of this size "
                                                               "detect (80% power) at this share of flipped "
                                                               "results; null when none flipped.")
    flip_share_percent: float = Field(description="Paired results that differ between the sides.")
    margin_points: float | None = Field(description="The margin given, chosen before the runs.")
    caveats: list[str]
    improved_cases: list[PairedCase]
    regressed_cases: list[PairedCase]
    paired_cases: int
    pairing: Pairing = Field(description="task_and_route: the sides share routes; task: they share none, so "
                                         "cases are paired by Task with one route per side.")
    routes: SideRoutes = Field(description="The routes of the paired cases on each side.")
    per_route: list[RouteComparison] = Field(description="Each route's own test (pairing by Task and route).")
    mean_reward_difference: MeanRewardDifference
    advice: str = Field(description="Adopt the candidate, keep the baseline, or add cases.")
    cost_usd: SideCosts
    q_value: float | None = Field(None, exclude_if=absent, description="Among several candidates: the "
                                                                       "Benjamini-Hochberg q-value of `p_value`.")


class RoundComparisons(BaseModel):
    """Several candidates, each against the baseline, with q-values over their McNemar p-values."""

    comparisons: dict[str, RoundComparison] = Field(description="Each candidate's comparison, by its name.")
    n_comparisons: int
    q_method: Literal["Benjamini-Hochberg"]


# What `amber compare` answers: the same records, headed by the names of the sides. (Pydantic puts the fields of
# the later base first, so the names lead, as they always have in `amber compare --json`.)

class _Sides(BaseModel):
    baseline: str = Field(description="The baseline, as named in the request.")
    candidate: str = Field(description="The candidate, as named in the request.")


class _Baseline(BaseModel):
    baseline: str = Field(description="The baseline, as named in the request.")


class NamedComparison(RoundComparison, _Sides):
    """One candidate against the baseline, the sides named."""

    def by_candidate(self) -> dict[str, RoundComparison]:
        """The comparison by its candidate's name."""
        return {self.candidate: self}


class NamedComparisons(RoundComparisons, _Baseline):
    """Several candidates against the baseline, which is named."""

    def by_candidate(self) -> dict[str, RoundComparison]:
        """Each comparison by its candidate's name."""
        return self.comparisons


# ---- pairing -----------------------------------------------------------------------------------

def latest_scored(evidence: Sequence[TrialEvidence]) -> dict[Case, TrialEvidence]:
    """The latest scored attempt of each (Task, route), by the report's rule (`report.later`); cases with no
    scored attempt are absent."""
    latest: dict[Case, TrialEvidence] = {}
    for e in evidence:
        key = (e.task_name, e.route)
        if e.scored and (key not in latest or later(e, latest[key])):
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


def _cost(evidence: Sequence[TrialEvidence], cases: set[Case]) -> tuple[float, int]:
    """Total cost of every attempt (scored or not) on the cases, and how many attempts had no cost."""
    mine = [e for e in evidence if (e.task_name, e.route) in cases]
    return math.fsum(e.cost_usd or 0.0 for e in mine), sum(e.cost_usd is None for e in mine)


def _mean_reward_difference(cand: Sequence[TrialEvidence], base: Sequence[TrialEvidence],
                            cand_key: Mapping[Case, str], base_key: Mapping[Case, str]) -> PairedDifference:
    """The engine's paired bootstrap of candidate minus baseline mean Reward over the paired cases (spec 1),
    each side one cell whose Tasks are the cases (keyed alike on both sides)."""
    from amber_pipeline.scoring.bootstrap import NO_INTERVAL
    from amber_pipeline.scoring.engine import PairedDifference, difference

    rows = [evidence_row(e, cell=side, task=key[(e.task_name, e.route)])
            for side, evidence, key in (("candidate", cand, cand_key), ("baseline", base, base_key))
            for e in evidence if (e.task_name, e.route) in key]
    cells = {c.cell: c for c in score_rows(rows).cells}
    if {"candidate", "baseline"} - cells.keys():
        return PairedDifference(math.nan, NO_INTERVAL, 0)
    return difference(cells["candidate"], cells["baseline"])


def _counts(pairs: Sequence[tuple[TrialEvidence, TrialEvidence]]) -> tuple[int, int, int]:
    improved = sum(not b.passed and c.passed for b, c in pairs)
    regressed = sum(b.passed and not c.passed for b, c in pairs)
    return improved, regressed, len(pairs)


def _pair(base: dict[Case, TrialEvidence], cand: dict[Case, TrialEvidence]
          ) -> tuple[Pairing, list[Case], list[Case]]:
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


def _side_caveats(base: list[TrialEvidence], cand: list[TrialEvidence], pairing: Pairing,
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
            candidate_route: str | None = None) -> RoundComparison:
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
    mrd = _mean_reward_difference(cand, base, dict(zip(c_cases, keys, strict=True)),
                                  dict(zip(b_cases, keys, strict=True)))
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
            per_route.append(RouteComparison(route=r, paired_cases=m, improved=i, regressed=g,
                                             difference_ci95=st.percent_interval(st.agresti_min_interval(i, g, m)),
                                             p_value=st.mcnemar_exact_p(i, g)))
    return RoundComparison(
        baseline_rate_percent=100.0 * sum(b.passed for b, _ in pairs) / n,
        candidate_rate_percent=100.0 * sum(c.passed for _, c in pairs) / n,
        difference_points=100.0 * (improved - regressed) / n,
        difference_ci95=st.percent_interval(diff),
        verdict=verdict,
        p_value=p,
        detectable_change_points=st.defined(st.paired_detectable_change_points(n, flip, ALPHA, POWER)),
        flip_share_percent=100.0 * flip,
        margin_points=margin_points,
        caveats=caveats,
        improved_cases=[PairedCase(task=t, route=r) for (b, c), (t, r) in zip(pairs, labels, strict=True)
                        if c.passed and not b.passed],
        regressed_cases=[PairedCase(task=t, route=r) for (b, c), (t, r) in zip(pairs, labels, strict=True)
                         if b.passed and not c.passed],
        paired_cases=n,
        pairing=pairing,
        routes=SideRoutes(baseline=_routes(b_cases), candidate=_routes(c_cases)),
        per_route=per_route,
        mean_reward_difference=MeanRewardDifference(mean=st.defined(mrd.mean),
                                                    ci95=st.defined_interval(mrd.ci95.low, mrd.ci95.high),
                                                    n_shared_tasks=mrd.n_shared_tasks,
                                                    too_close_to_call=mrd.too_close_to_call),
        advice=st.advice(verdict, cost_b, cost_c, margin_points, interval),
        cost_usd=SideCosts(baseline=cost_b, candidate=cost_c),
    )


def compare_many(baseline: Sequence[TrialEvidence], candidates: Mapping[str, Sequence[TrialEvidence]],
                 margin_points: float | None = None, *, route: str | None = None,
                 candidate_routes: Mapping[str, str] | None = None) -> RoundComparisons:
    """Each candidate against the baseline, with Benjamini-Hochberg q-values over their McNemar p-values."""
    if not candidates:
        raise AmberError("No candidate to compare: give at least one.")
    results = {name: compare(baseline, ev, margin_points=margin_points, route=route,
                             candidate_route=(candidate_routes or {}).get(name))
               for name, ev in candidates.items()}
    q_values = st.benjamini_hochberg([r.p_value for r in results.values()])
    for r, q in zip(results.values(), q_values, strict=True):
        r.q_value = q
        if r.verdict in ("better", "worse") and r.p_value < ALPHA <= q:
            r.caveats.append(f"Among {len(results)} comparisons its Benjamini-Hochberg q = {q:.3g} is not below "
                             "0.05, so this finding may be one of chance.")
    return RoundComparisons(comparisons=results, n_comparisons=len(results), q_method="Benjamini-Hochberg")


def named(result: RoundComparison | RoundComparisons, baseline: str, candidate: str | None = None
          ) -> NamedComparison | NamedComparisons:
    """The result headed by the names of its sides (the candidate's: with one candidate only)."""
    if isinstance(result, RoundComparisons):
        return NamedComparisons(baseline=baseline, **dict(result))
    assert candidate is not None, "one candidate's comparison names it"
    return NamedComparison(baseline=baseline, candidate=candidate, **dict(result))
