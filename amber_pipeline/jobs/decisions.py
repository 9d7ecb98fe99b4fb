"""What a Job that stops once its comparison is decided records: each pair's interval and verdict
(`PairInterval`), and where the Job's comparisons stand (`JobDecision`), as `jobs/stopping.py` finds them.

Typed records only, so the Job's record (`records.Job.stop`), the API's results and the report read them without
the statistics that make them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ALPHA = 0.05  # for all of a Job's comparisons together


class PairInterval(BaseModel):
    """One comparison of a stopping Job: its confidence sequence for ``a`` minus ``b`` over the whole Benchmark
    Version, and what it decides; once one side is better, it is ``a``."""

    a: str = Field(description="The first cell's label (Agent / Model Configuration).")
    b: str = Field(description="The second cell's label.")
    a_cell: str = Field(description="The first cell's key.")
    b_cell: str = Field(description="The second cell's key.")
    lower_points: float = Field(description="The interval's lower end for a - b, in points (-100 to 100), for "
                                            "the whole Benchmark Version, not only the Tasks run.")
    upper_points: float = Field(description="Its upper end, in points.")
    verdict: Literal["a_better", "too_close_to_matter", "undecided"] = Field(
        description="What the interval decides: a is better (it lies above the margin: the better side is named a), "
                    "the two are too close to matter (it lies within the margin), or not yet.")
    tasks_compared: int = Field(description="Tasks with a difference in the interval: finished and scored in "
                                            "both cells.")

    @property
    def decided(self) -> bool:
        return self.verdict != "undecided"

    def sentence(self) -> str:
        """The pair's verdict in words, with its interval in points."""
        interval = f"{self.lower_points:+.1f} to {self.upper_points:+.1f} points"
        if self.verdict == "a_better":
            return f"{self.a} is better than {self.b} ({interval})"
        if self.verdict == "too_close_to_matter":
            return f"{self.a} and {self.b} are too close to matter ({interval})"
        return f"{self.a} against {self.b} is undecided ({interval})"


class JobDecision(BaseModel):
    """Where a stopping Job's comparisons stand after the Tasks every compared cell finished in its order."""

    tasks_seen: int = Field(description="The Tasks, in the Job's order, that every compared cell finished.")
    tasks_total: int = Field(description="The Benchmark Version's Tasks.")
    margin_points: float = Field(description="Differences within this many points are too close to matter "
                                             "(0: no margin).")
    alpha: float = Field(ALPHA, description="The chance that any of the intervals ever misses its difference, "
                                            "for all the pairs together (Bonferroni).")
    pairs: list[PairInterval]

    @property
    def decided(self) -> bool:
        return bool(self.pairs) and all(p.decided for p in self.pairs)

    @property
    def early(self) -> bool:
        """Decided before every Task ran: a Job that recorded it stopped early."""
        return self.decided and self.tasks_seen < self.tasks_total

    def sentence(self) -> str:
        """Why a Job stopped, or what it found when it ran every Task, in one sentence."""
        if self.early:
            head = f"Stopped early after {self.tasks_seen} of {self.tasks_total} Tasks, every comparison decided"
        else:
            head = f"Every comparison decided after all {self.tasks_total} Tasks"
        return (f"{head} at {100 * (1 - self.alpha):.0f}% for the whole Benchmark Version: "
                + "; ".join(p.sentence() for p in self.pairs) + ".")


class Stopping(BaseModel):
    """What a Job run with stop_when_decided shows: where its comparisons stand (at its stop, or so far), and what
    stopping saved."""

    decision: JobDecision = Field(description="The comparisons' intervals and verdicts: those the Job stopped on, "
                                               "or, while none stopped it, after the Tasks finished so far.")
    stopped_early: bool = Field(description="Every comparison was decided before every Task ran, so the Job "
                                            "started no more Trials.")
    trials_run: int = Field(description="Trials of the Job with a result, every cell's.")
    trials_planned: int = Field(description="The Trials its Quote was for: every Task of every cell.")
    reserved_usd: float = Field(description="What the Job reserved (its Quote, and any continuation).")
    charged_usd: float = Field(description="What its Trials were charged.")
    refunded_usd: float = Field(description="What went back to the Wallet when it ended: what stopping saved, "
                                            "with what the Quote overestimated.")

    @property
    def trials_saved(self) -> int:
        return max(self.trials_planned - self.trials_run, 0)
