"""Placing a round on a public board (section 4b of ``evaluation-analysis.md``).

A round's pass rate and strict pass rate, each with its Wilson interval, are
placed among a board's rows (agent, model, pass rate, Trials per Task) as a
range of possible ranks, with caveats a careful reader needs.
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

from pydantic import BaseModel, Field

from amber_pipeline.analysis import statistics as st
from amber_pipeline.analysis.compare import latest_scored, select_route
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.statistics import Bounds
from amber_pipeline.errors import AmberError

BOARD_FIELDS = "agent, model, pass_rate (percent) and trials_per_task"


class BoardRow(BaseModel):
    """A row of a public board, as checked."""

    agent: str
    model: str
    pass_rate: float = Field(description="Percent, 0 to 100.")
    trials_per_task: int | None = Field(description="How many Trials per Task the row ran; null when it does not "
                                                    "say.")


class Placing(BaseModel):
    """One round (one route) placed on a public board (spec 4b): its pass rate and strict pass rate with their 95%
    Wilson intervals, each as a range of possible ranks (1 = best; ties share the better rank)."""

    route: str
    scored_tasks: int
    solved_tasks: int
    all_tasks: int = Field(description="The Benchmark Version's Tasks, the strict pass rate's denominator.")
    attempts_per_task: int = Field(description="The most attempts of one Task.")
    pass_rate_percent: float | None = Field(description="Solved over scored Tasks; null when none was scored.")
    pass_rate_ci95: Bounds
    pass_rate_rank: tuple[int, int] = Field(description="The best and worst possible rank.")
    strict_pass_rate_percent: float | None = Field(description="Solved over all Tasks.")
    strict_pass_rate_ci95: Bounds
    strict_pass_rate_rank: tuple[int, int]
    positions: int = Field(description="The board's rows, and this round.")
    board: list[BoardRow] = Field(description="The board, the best pass rate first.")
    caveats: list[str]


class _Round(BaseModel):
    source: str = Field(description="The round, as named in the request.")


class NamedPlacing(Placing, _Round):
    """What `amber leaderboard` answers: the placing headed by the round's name (pydantic puts the fields of the
    later base first)."""


def _board_row(raw: Mapping[Any, Any], i: int, where: str) -> BoardRow:
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
    return BoardRow(agent=agent, model=model, pass_rate=rate, trials_per_task=trials)


def _board(rows: Sequence[Mapping[Any, Any]], where: str) -> list[BoardRow]:
    if not rows:
        raise AmberError(f"{where} has no rows: give at least one row of {BOARD_FIELDS}.")
    board = [_board_row(r, i, where) for i, r in enumerate(rows, 1)]
    rates = [r.pass_rate for r in board]
    if max(rates) <= 1.0 and any(0.0 < x < 1.0 for x in rates):
        raise AmberError(f"{where} gives every pass_rate as at most 1: give percents (42.5), not proportions.")
    return board


def load_board(path: str | Path) -> list[BoardRow]:
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
                all_tasks: Collection[str] | int | None = None, route: str | None = None) -> Placing:
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
    rates = [r.pass_rate for r in board]
    pass_rank = st.rank_range((100 * pass_ci[0], 100 * pass_ci[1]), rates)
    strict_rank = st.rank_range((100 * strict_ci[0], 100 * strict_ci[1]), rates)
    attempts = max(Counter(e.task_name for e in ev).values())
    more = [r.trials_per_task for r in board if r.trials_per_task is not None and r.trials_per_task > attempts]
    if more:
        caveats.append(f"{len(more)} board rows ran more Trials per Task (up to {max(more)}) than this round "
                       f"({attempts}), so their rates are less noisy and may average over attempts rather than count "
                       "each Task once.")
    if unsaid := sum(r.trials_per_task is None for r in board):
        caveats.append(f"{unsaid} board rows do not say how many Trials per Task they ran.")
    caveats.append("The board's rates carry no intervals, so the ranks here treat them as exact although they "
                   "are uncertain too.")
    if scored < len(attempted):
        caveats.append(f"{len(attempted) - scored} attempted Tasks have no scored attempt: they are left out of the "
                       "pass rate and count as failed in the strict pass rate.")
    if scored == 0:
        caveats.append("No Task was scored, so the pass rate and its rank are unknown.")
    return Placing(
        route=routes[0], scored_tasks=scored, solved_tasks=solved, all_tasks=n_all,
        attempts_per_task=attempts,
        pass_rate_percent=st.defined(100 * solved / scored) if scored else None,
        pass_rate_ci95=st.percent_interval(pass_ci),
        pass_rate_rank=pass_rank,
        strict_pass_rate_percent=100 * solved / n_all if n_all else None,
        strict_pass_rate_ci95=st.percent_interval(strict_ci),
        strict_pass_rate_rank=strict_rank,
        positions=len(board) + 1,
        board=sorted(board, key=lambda r: -r.pass_rate),
        caveats=caveats,
    )
