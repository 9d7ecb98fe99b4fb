"""Amber's cell scores and comparisons of any evidence: the scoring engine over Trial attempts.

A report's cells are (source, route) pairs: an Amber Job or a Harbor job
folder, and an Agent with its Model Configuration (or model). Each becomes a
cell of the engine with its source as scope and Benchmark Version, and its
Agent as Agent Version (a source runs one version of each Agent), so the
engine pairs the model routes of one Agent within one source. A Trial's
Reward counts only when it is not Errored; its duration is its wall time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from amber_pipeline.analysis.evidence import TrialEvidence

if TYPE_CHECKING:  # the engine (NumPy, Arrow) is loaded by the first score, not by whoever reads a report's types
    from amber_pipeline.scoring import engine
    from amber_pipeline.scoring.bootstrap import Resampling


def wall_time_sec(e: TrialEvidence) -> float | None:
    if e.started_at is None or e.finished_at is None:
        return None
    return (e.finished_at - e.started_at).total_seconds()


def cell_of(e: TrialEvidence) -> str:
    """The engine's cell of an attempt: its source and route."""
    return f"{e.source}\x1f{e.route}"


def score_rows(rows: Iterable[tuple], resampling: Resampling | None = None) -> engine.Scores:
    """Score rows given as tuples in `schemas.SCORING_ROW_SCHEMA` order (``resampling``: the engine's default
    unless given)."""
    import pyarrow as pa

    from amber_pipeline.scoring import engine
    from amber_pipeline.scoring.bootstrap import DEFAULT_RESAMPLING
    from amber_pipeline.warehouse import instances
    from amber_pipeline.warehouse.schemas import SCORING_ROW_SCHEMA

    columns = list(zip(*rows, strict=True)) or [()] * len(SCORING_ROW_SCHEMA)
    table = pa.table([pa.array(list(c), type=f.type) for c, f in zip(columns, SCORING_ROW_SCHEMA, strict=True)],
                     schema=SCORING_ROW_SCHEMA)
    with instances.scratch() as con:
        con.register("evidence_rows", table)
        return engine.score(con, "select * from evidence_rows", resampling or DEFAULT_RESAMPLING)


def evidence_row(e: TrialEvidence, *, cell: str | None = None, task: str | None = None) -> tuple:
    """One attempt as an engine row; ``cell`` and ``task`` may regroup attempts (as `amber compare` does)."""
    return (e.source, cell or cell_of(e), e.source, e.agent, e.agent, e.model, task or e.task_name,
            None if e.errored else e.reward, e.errored, e.cost_usd, wall_time_sec(e))


def score_evidence(evidence: Sequence[TrialEvidence], resampling: Resampling | None = None) -> engine.Scores:
    """Every (source, route) cell of the evidence scored, and the model routes of one Agent compared."""
    return score_rows((evidence_row(e) for e in evidence), resampling)
