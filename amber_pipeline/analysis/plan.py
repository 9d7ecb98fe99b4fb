"""Planning a round (section 5 of ``evaluation-analysis.md``): what it can detect, and what a change needs."""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from amber_pipeline.analysis import statistics as st
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs.request import MAX_MARGIN_POINTS

ALPHA = 0.05
POWER = 0.8


class DetectableChange(BaseModel):
    """The smallest change, in points, a round detects with 80% power; null when it detects none."""

    same_tasks: float | None = Field(description="Against a round on the same Tasks (McNemar).")
    other_tasks: float | None = Field(description="Against a round on other Tasks (two-proportion z-test).")


class TasksNeeded(BaseModel):
    """Tasks per round to detect the change asked about with 80% power; null when no number of Tasks can."""

    same_tasks: int | None
    other_tasks: int | None


class StoppingPlan(BaseModel):
    """What a Job run with --stop-when-decided spends at a true difference, from simulated Jobs (spread of
    per-Task success probabilities like real Benchmarks', `scoring.sequential.simulated_differences`)."""

    difference_points: float = Field(description="The true difference between the two Model Configurations.")
    margin_points: float = Field(description="The margin the Jobs were decided with (0: none).")
    jobs_simulated: int
    median_trials_share_percent: float = Field(description="The median share of the full Job's Trials a stopped "
                                                           "Job runs.")
    mean_trials_share_percent: float
    decided_percent: float = Field(description="Jobs that decided before their last Task.")
    right_percent: float = Field(description="Jobs whose verdict is right: the better side named, past the margin, "
                                             "or too close to matter, within it.")


class Plan(BaseModel):
    """What a round can detect, and what a change needs (spec 5). Rates and shares in percent."""

    n_tasks: int
    attempts: int = Field(description="Attempts per Task: they do not enter the formulas, only the Trials.")
    trials_per_side: int
    rate_percent: float = Field(description="The expected pass rate.")
    flip_share_percent: float = Field(description="Results that flip between two runs on the same Tasks.")
    power: float
    alpha: float = Field(description="Two-sided.")
    detectable_change_points: DetectableChange
    change_points: float | None = Field(description="The change asked about, in points.")
    tasks_needed: TasksNeeded | None = Field(description="For the change asked about; null without one.")
    stopping: StoppingPlan | None = Field(None, description="For the change asked about (up to 40 points): what a "
                                                            "Job that stops once decided spends; null without one.")
    notes: list[str]


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
         delta_points: float | None = None, margin_points: float = 0.0) -> Plan:
    """What a round of ``n_tasks`` can detect, and how many Tasks a change of ``delta_points`` needs (spec 5).

    ``rate`` and ``flip_share`` are proportions (0..1). 80% power, two-sided alpha 0.05. Same Tasks:
    McNemar power given the share of results that flip (Connor 1987); other Tasks: two-proportion
    z-test at ``rate``. ``attempts`` does not enter the formulas: they count Tasks, one result each.
    With a change, also what a Job that stops once decided (with ``margin_points``) spends at that true
    difference (`stopping_plan`), where ``attempts`` do count.
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
    needed: TasksNeeded | None = None
    if delta_points is not None:
        needed = TasksNeeded(same_tasks=None, other_tasks=None)
        if delta_points / 100 <= flip_share:
            needed.same_tasks = st.tasks_needed(delta_points, flip_share=flip_share, alpha=ALPHA, power=POWER)
        else:
            notes.append(f"A change of {delta_points:g} points can't happen on the same Tasks when only "
                         f"{100 * flip_share:g}% of results flip.")
        try:
            needed.other_tasks = st.tasks_needed(delta_points, rate=rate, alpha=ALPHA, power=POWER)
        except ValueError:
            notes.append(f"Neither a rise nor a fall of {delta_points:g} points fits from a {100 * rate:g}% pass rate.")
    stopping = None
    if delta_points is not None and delta_points <= MAX_SIMULATED_POINTS:
        stopping = stopping_plan(n_tasks, attempts, delta_points, margin_points)
    elif delta_points is not None:
        notes.append(f"What a Job that stops once decided spends is simulated up to {MAX_SIMULATED_POINTS} points.")
    return Plan(
        n_tasks=n_tasks, attempts=attempts, trials_per_side=n_tasks * attempts,
        rate_percent=100 * rate, flip_share_percent=100 * flip_share, power=POWER, alpha=ALPHA,
        detectable_change_points=DetectableChange(same_tasks=st.defined(same), other_tasks=st.defined(other)),
        change_points=delta_points,
        tasks_needed=needed,
        stopping=stopping,
        notes=notes,
    )


MAX_SIMULATED_POINTS = 40
SIMULATED_VALUES = 2_000_000  # Jobs x Tasks simulated for a plan: about a second


def stopping_plan(n_tasks: int, attempts: int, difference_points: float, margin_points: float = 0.0,
                  seed: int = 0) -> StoppingPlan:
    """The share of its Trials a Job that stops once decided runs when the two sides truly differ by
    ``difference_points``: from simulated Jobs of ``n_tasks`` Tasks and ``attempts`` Trials per Task, as
    many as fit in about a second (100 to 1,000), seeded so the same plan prints the same numbers."""
    import numpy as np  # only for a plan that asks about a change

    from amber_pipeline.scoring import sequential

    if not 0 <= margin_points <= MAX_MARGIN_POINTS:  # a Job's own rule (`JobRequest`)
        raise AmberError(f"The margin must be from 0 to {MAX_MARGIN_POINTS} points, not {margin_points:g}.")
    jobs = max(100, min(1000, SIMULATED_VALUES // n_tasks))
    found = sequential.simulate_stopped_jobs(difference_points, n_tasks, attempts, ALPHA, margin_points, jobs,
                                             seed)
    share = found.trials_share()
    right = "a_better" if difference_points > margin_points else "too_close_to_matter"
    verdicts = [sequential.VERDICTS[v] for v in found.verdicts]
    def percent(share: float) -> float:
        return round(100 * share, 3)  # a simulation's share: more digits would be noise

    return StoppingPlan(difference_points=difference_points, margin_points=margin_points, jobs_simulated=jobs,
                        median_trials_share_percent=percent(float(np.median(share))),
                        mean_trials_share_percent=percent(float(share.mean())),
                        decided_percent=percent(float((found.tasks_seen < n_tasks).mean())),
                        right_percent=percent(sum(v == right for v in verdicts) / jobs))


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
