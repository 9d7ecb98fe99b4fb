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
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Literal, TypedDict

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from amber_pipeline.analysis import scores as scores_of
from amber_pipeline.analysis import statistics as analysis_stats
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.scores import wall_time_sec
from amber_pipeline.analysis.statistics import Bounds, defined, defined_interval
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs.decisions import Stopping

Cause = Literal["dead_tools", "agent_errors", "agent_timeouts", "early_stops", "unscored", "other"]
CAUSES: tuple[Cause, ...] = ("dead_tools", "agent_errors", "agent_timeouts", "early_stops", "unscored",
                             "other")  # precedence
Outcome = Literal["passed", "failed", "errored", "unscored"]
EARLY_STOP_SHARE = 0.25  # spec 3: stopped by itself within 25% of its time limit
NEAR_MISS_SHARE = 0.8  # spec 3: the Verifier passed at least 80% of its tests
STABLE_LABELS = 30  # spec 3: under 30 labels the kappa is not stable
KAPPA_TRUST, KAPPA_USABLE = 0.6, 0.8

Case = tuple[str, str, str]  # (source, route, Task)


def absent(value: object) -> bool:
    """For `exclude_if`: a field left out of the JSON when None, as it is there only when its source gave it."""
    return value is None


# ---------------------------------------------------------------- the report's records


class Rate(BaseModel):
    """A pass rate in percent with its 95% interval."""

    solved: int = Field(description="Cases (or attempts) that passed.")
    n: int = Field(description="Cases (or attempts) counted.")
    percent: float | None = Field(description="100 * solved / n; null when n is 0.")
    ci95: Bounds = Field(description="The 95% interval of `percent`, [low, high] in percent; an undefined end "
                                     "(no case; one Task, for a cluster-robust interval) is null.")


class ReportCell(BaseModel):
    """One cell of the report: a route within a source, scored by Amber's engine, its pass rates beside."""

    source: str = Field(description="The Amber Job id, or harbor:<folder> of a Harbor job folder.")
    route: str = Field(description="The Agent, or Agent/model: the cell's name within its source.")
    agent: str
    model: str | None = Field(description="The Model Configuration (or Harbor's model name); null for the bounds "
                                          "(oracle, nop).")
    mean_reward: float | None = Field(description="Amber's score: the mean Reward per Task over non-Errored "
                                                  "Trials, then across Tasks; null when no Task has one.")
    ci95: Bounds = Field(description="The 95% bootstrap interval of `mean_reward` (resampling Tasks), [low, high]; "
                                     "an undefined end is null.")
    pass_rate: Rate = Field(description="Tasks passed by their latest scored attempt, over the Tasks scored "
                                        "(Wilson interval).")
    strict_pass_rate: Rate = Field(description="The same over every Task: one unscored or unattempted counts as "
                                               "failed.")
    cost_usd: float = Field(description="What the cell's Trials cost, in USD (an unknown cost counts 0).")
    mean_duration_sec: float | None = Field(description="The mean wall time of a Trial; null when none is known.")
    errored: int = Field(description="Errored Trials (a failure outside Model and Agent), kept out of the score.")
    n_tasks: int = Field(description="Tasks with a Reward in the score.")
    n_trials: int
    partial: bool | None = Field(None, exclude_if=absent, description=(
        "In a Job that stopped once its comparisons were decided: true when the cell ran only some of the "
        "Version's Tasks, so its mean covers those (a random sample of them), not the whole Version."))


class CellComparison(BaseModel):
    """Amber's paired comparison of two model routes of one Agent within one source."""

    better: str = Field(description="The route with the higher mean Reward.")
    worse: str
    mean_difference: float | None = Field(description="The mean Reward of `better` minus `worse`'s, over their "
                                                      "shared Tasks.")
    ci95: Bounds = Field(description="Its 95% paired bootstrap interval, [low, high].")
    n_shared_tasks: int
    too_close_to_call: bool = Field(description="The interval includes 0.")


class Outcomes(BaseModel):
    """The round's attempts by outcome."""

    passed: int
    failed: int = Field(description="Scored, Reward below 1.")
    errored: int = Field(description="Amber's Errored.")
    unscored: int = Field(description="No Verifier result, or the model never really answered.")


class FailureCause(BaseModel):
    """One cause of failed attempts: how many, and on which Tasks."""

    cause: Cause
    count: int
    tasks: list[str]


class NearMiss(BaseModel):
    """A failed case whose latest scored attempt passed at least 80% of the Verifier's tests."""

    task: str
    route: str
    source: str
    trial: str
    tests_passed: int
    tests_total: int
    fraction: float = Field(description="tests_passed / tests_total.")


class Totals(BaseModel):
    """Sums over every Trial of the report (the bounds' too)."""

    input_tokens: int
    output_tokens: int
    cost_usd: float
    duration_sec: float = Field(description="The Trials' wall time, summed.")
    trials: int


class LabelDisagreement(BaseModel):
    """A failed attempt whose label names another cause than the rules do."""

    trial: str
    rule: Cause
    label: Cause


class MissingTask(BaseModel):
    task: str
    trials: int = Field(description="Trials still to run for the Task.")
    cost_usd: float = Field(description="The estimate to run them.")


class MissingTasks(BaseModel):
    """A cell of a Job that stopped early: its Tasks without all their scored Trials, and the estimate to finish
    them (what `amber job continue` reserves)."""

    route: str
    cell_key: str
    cost_usd: float
    tasks: list[MissingTask]


class MeteringDisagreement(BaseModel):
    """A route whose Agent counted its tokens otherwise than the model proxy metered them (by more than 1%); the
    proxy's count is the one charged."""

    route: str
    metered_input: int
    agent_input: int
    metered_output: int
    agent_output: int


class LabelCheck(TypedDict, total=False):
    """A report's label fields: all of them when labels were given, none otherwise."""

    n_labels: int
    cohen_kappa: float | None
    krippendorff_alpha: float | None
    label_guidance: str
    label_disagreements: list[LabelDisagreement]
    labels_unmatched: int


class RoundReport(BaseModel):
    """The report of a round (sections 1-3 of the spec): pass rates with intervals, why attempts failed, near
    misses, and the cells with their scores and comparisons. Numbers and names only; no NaN (null instead).

    The round's numbers cover the routes with a model (the bounds, oracle and nop, only when no route has one);
    `cells` and `totals` cover every route. The label fields are there only when labels were given,
    `missing_tasks` only for a Job that stopped early, `metering_disagreements` only for an Amber Job."""

    sources: list[str]
    routes: list[str] = Field(description="Every route of the evidence.")
    headline_routes: list[str] = Field(description="The routes the round's numbers cover.")
    n_trials: int = Field(description="The round's attempts.")
    pass_rate: Rate = Field(description="Each case (source, route, Task) once, by its latest scored attempt, over "
                                        "the cases scored (Wilson interval).")
    strict_pass_rate: Rate = Field(description="The same over every Task of every headline route: an unscored or "
                                               "unattempted case counts as failed.")
    attempt_pass_rate: Rate = Field(description="Every scored attempt, with a cluster-robust interval by Task.")
    detectable_change_points: float | None = Field(description="The smallest change, in points, that a second "
                                                               "round on as many other Tasks detects (80% power, "
                                                               "alpha 0.05); null without a scored case.")
    attempts_per_task: int = Field(description="The fewest scored attempts of a case: the largest k of pass@k.")
    pass_at_k: dict[str, float] = Field(description="k -> percent of cases that k attempts solve at least once "
                                                    "(unbiased estimator).")
    pass_hat_k: dict[str, float] = Field(description="k -> percent of cases that k attempts all solve.")
    unstable_tasks: list[str] = Field(description="Tasks both solved and failed.")
    unscored_model_tasks: list[str] = Field(description="Tasks without a scored attempt.")
    unattempted_tasks: list[str] = Field(description="Tasks of the Benchmark never attempted.")
    outcomes: Outcomes
    failure_causes: list[FailureCause] = Field(description="Every attempt that did not pass, by its first cause; "
                                                           "the commonest first.")
    near_misses: list[NearMiss]
    cells: list[ReportCell] = Field(description="Every cell, the best mean Reward first.")
    comparisons: list[CellComparison] = Field(description="The model routes of each Agent within a source, in "
                                                          "pairs.")
    totals: Totals
    n_labels: int | None = Field(None, description="Failed attempts with a label.")
    cohen_kappa: float | None = Field(None, description="The rules' causes against the labels; null when "
                                                        "undefined.")
    krippendorff_alpha: float | None = Field(None, description="The same, nominal alpha; null when undefined.")
    label_guidance: str | None = Field(None, description="What the kappa allows.")
    label_disagreements: list[LabelDisagreement] | None = None
    labels_unmatched: int | None = Field(None, description="Labels that name no failed attempt of the round.")
    missing_tasks: list[MissingTasks] | None = Field(None, exclude_if=absent)
    metering_disagreements: list[MeteringDisagreement] | None = Field(None, exclude_if=absent)
    stopping: Stopping | None = Field(None, exclude_if=absent)

    # Not annotated: pydantic would take a return annotation for the schema, and /openapi.json would lose the fields.
    @model_serializer(mode="wrap")
    def _labels_only_when_given(self, handler: SerializerFunctionWrapHandler):
        """Without labels the label fields are left out rather than null: a null kappa says the labels gave none."""
        data = handler(self)
        if self.n_labels is None:
            for name in LabelCheck.__annotations__:
                data.pop(name, None)
        return data


# ---------------------------------------------------------------- computing it


def _rate(solved: int, n: int, rate: float, ci: tuple[float, float]) -> Rate:
    """A rate in percent; ``percent`` and both ends of ``ci95`` are None when undefined (e.g. n == 0)."""
    return Rate(solved=solved, n=n, percent=defined(100.0 * rate), ci95=defined_interval(100.0 * ci[0], 100.0 * ci[1]))


def wilson_rate(solved: int, n: int) -> Rate:
    return _rate(solved, n, solved / n if n else math.nan, analysis_stats.wilson_interval(solved, n))


def outcome(e: TrialEvidence) -> Outcome:
    """passed / failed (scored, Reward below 1) / errored (Amber's Errored) / unscored (spec 2's rule)."""
    if e.errored:
        return "errored"
    if not e.scored:
        return "unscored"
    return "passed" if e.passed else "failed"


def failure_cause(e: TrialEvidence, time_limit_sec: float | None = None) -> Cause:
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


def later(a: TrialEvidence, b: TrialEvidence) -> bool:
    """a is the later attempt: higher attempt number, then later start (one with a start is later than one
    without); a tie, or one naive and one aware start, keeps the first seen."""
    if a.attempt != b.attempt:
        return a.attempt > b.attempt
    try:
        return a.started_at is not None and (b.started_at is None or a.started_at > b.started_at)
    except TypeError:
        return False


def latest_scored(attempts: Iterable[TrialEvidence]) -> TrialEvidence | None:
    """Each case counts once, by its latest scored attempt (spec 2); None when no attempt of it is scored."""
    latest = None
    for e in attempts:
        if e.scored and (latest is None or later(e, latest)):
            latest = e
    return latest


def _pass_rates(cases: Mapping[Case, list[TrialEvidence]], n_all: int
                ) -> tuple[Rate, Rate, Rate, list[TrialEvidence]]:
    """The pass rate, strict pass rate and attempt pass rate of the cases, and each case's attempt that counts."""
    latest = {c: latest_scored(es) for c, es in cases.items()}
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


def _group[K: Hashable](evidence: Iterable[TrialEvidence], key: Callable[[TrialEvidence], K]
                        ) -> dict[K, list[TrialEvidence]]:
    groups: dict[K, list[TrialEvidence]] = defaultdict(list)
    for e in evidence:
        groups[key(e)].append(e)
    return dict(groups)


def _cells(evidence: Sequence[TrialEvidence], task_names: Sequence[str]
           ) -> tuple[list[ReportCell], list[CellComparison]]:
    """Amber's cells and comparisons (the scoring engine's), with each cell's pass rates beside its score."""
    scores = scores_of.score_evidence(evidence)
    routes = _group(evidence, scores_of.cell_of)
    cells = []
    for c in scores.cells:
        es = routes[c.cell]
        rate, strict, _, _ = _pass_rates(_group(es, _case), len(task_names))
        cells.append(ReportCell(
            source=c.scope, route=es[0].route, agent=c.agent, model=c.model, mean_reward=defined(c.mean),
            ci95=defined_interval(c.ci95.low, c.ci95.high), pass_rate=rate, strict_pass_rate=strict,
            cost_usd=c.cost_usd, mean_duration_sec=defined(c.mean_duration_sec), errored=c.errored,
            n_tasks=c.n_tasks, n_trials=c.n_trials))
    comparisons = [CellComparison(
        better=routes[c.better.cell][0].route, worse=routes[c.worse.cell][0].route,
        mean_difference=defined(c.difference.mean),
        ci95=defined_interval(c.difference.ci95.low, c.difference.ci95.high),
        n_shared_tasks=c.difference.n_shared_tasks, too_close_to_call=c.difference.too_close_to_call,
    ) for c in scores.comparisons]
    return cells, comparisons


def _labels(failed: list[tuple[TrialEvidence, Cause]], labels: Mapping[str, str]) -> LabelCheck:
    unknown = sorted({c for c in labels.values() if c not in CAUSES})
    if unknown:
        raise AmberError(f"The labels give the cause {unknown[0]!r}, which is not one of {', '.join(CAUSES)}: "
                         "fix labels.json.")
    pairs = [(e.trial_name, rule, labels[e.trial_name]) for e, rule in failed if e.trial_name in labels]
    rules, given = [r for _, r, _ in pairs], [g for _, _, g in pairs]
    kappa = defined(analysis_stats.cohen_kappa(rules, given))
    return LabelCheck(
        n_labels=len(pairs), cohen_kappa=kappa,
        krippendorff_alpha=defined(analysis_stats.krippendorff_alpha_nominal(list(zip(rules, given, strict=True)))),
        label_guidance=label_guidance(kappa, len(pairs)),
        label_disagreements=[LabelDisagreement.model_validate({"trial": t, "rule": r, "label": g})
                             for t, r, g in sorted(pairs) if r != g],
        labels_unmatched=len(set(labels) - {e.trial_name for e, _ in failed}),
    )


def build_report(evidence: list[TrialEvidence], *, all_tasks: list[str] | None = None,
                 task_time_limits: dict[str, float] | None = None,
                 labels: dict[str, str] | None = None,
                 missing_tasks: list[MissingTasks] | None = None,
                 metering_disagreements: list[MeteringDisagreement] | None = None,
                 stopping: Stopping | None = None) -> RoundReport:
    """The round's report.

    ``all_tasks``: every Task of the Benchmark Version, for the strict pass rate (default: the Tasks
    seen in the evidence). ``task_time_limits``: agent time limits by Task, else each attempt's own.
    ``labels``: trial name -> cause, to check the causes (spec 3). ``missing_tasks`` (for an Amber Job
    that stopped early: its cells' Tasks still without a scored Trial and the estimate to finish them)
    and ``metering_disagreements`` (an Amber Job's) come from the Job's record and are kept as given.
    Raises :class:`AmberError` when there is no evidence, when the evidence names a Task outside
    ``all_tasks``, or on an unknown cause.
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
    rate = pass_rate.solved / pass_rate.n if pass_rate.n else math.nan
    detectable = analysis_stats.detectable_change_points(rate, pass_rate.n) if pass_rate.n else math.nan

    failed = [(e, failure_cause(e, limits.get(e.task_name))) for e in round_ if outcome(e) != "passed"]
    by_cause: dict[Cause, set[str]] = defaultdict(set)
    for e, cause in failed:
        by_cause[cause].add(e.task_name)
    counts = Counter(cause for _, cause in failed)
    causes = [FailureCause(cause=c, count=counts[c], tasks=sorted(by_cause[c]))
              for c in sorted(counts, key=lambda c: (-counts[c], CAUSES.index(c)))]
    near = [NearMiss(task=e.task_name, route=e.route, source=e.source, trial=e.trial_name,
                     tests_passed=e.tests_passed, tests_total=e.tests_total,
                     fraction=e.tests_passed / e.tests_total)
            for e in counted if not e.passed and e.tests_total and e.tests_passed is not None
            and e.tests_passed >= NEAR_MISS_SHARE * e.tests_total]
    outcomes = Counter(outcome(e) for e in round_)

    cells, comparisons = _cells(evidence, task_names)
    if stopping is not None and stopping.stopped_early:
        ran = {route: len({e.task_name for e in es}) for route, es in _group(evidence, lambda e: e.route).items()}
        cells = [c.model_copy(update={"partial": ran.get(c.route, 0) < stopping.decision.tasks_total})
                 for c in cells]
    return RoundReport(
        sources=sorted({e.source for e in evidence}),
        routes=sorted({e.route for e in evidence}),
        headline_routes=sorted({r for _, r in cells_of_round}),
        n_trials=len(round_),
        pass_rate=pass_rate, strict_pass_rate=strict, attempt_pass_rate=attempt,
        detectable_change_points=defined(detectable),
        attempts_per_task=k_max,
        pass_at_k={str(k): 100.0 * analysis_stats.mean_pass_at_k(scored_pairs, k) for k in range(1, k_max + 1)},
        pass_hat_k={str(k): 100.0 * analysis_stats.mean_pass_hat_k(scored_pairs, k) for k in range(1, k_max + 1)},
        unstable_tasks=sorted({c[2] for c, (n, s) in pairs.items() if 0 < s < n}),
        unscored_model_tasks=sorted({c[2] for c, (n, _) in pairs.items() if n == 0}),
        unattempted_tasks=sorted(set(task_names) - {c[2] for c in cases}),
        outcomes=Outcomes(passed=outcomes["passed"], failed=outcomes["failed"], errored=outcomes["errored"],
                          unscored=outcomes["unscored"]),
        failure_causes=causes,
        near_misses=sorted(near, key=lambda m: (-m.fraction, m.task, m.route)),
        cells=cells,
        comparisons=comparisons,
        totals=Totals(
            input_tokens=sum(e.input_tokens or 0 for e in evidence),
            output_tokens=sum(e.output_tokens or 0 for e in evidence),
            cost_usd=math.fsum(e.cost_usd or 0.0 for e in evidence),
            duration_sec=math.fsum(d for d in map(wall_time_sec, evidence) if d is not None),
            trials=len(evidence),
        ),
        **(_labels(failed, labels) if labels is not None else LabelCheck()),
        missing_tasks=missing_tasks,
        metering_disagreements=metering_disagreements,
        stopping=stopping,
    )
