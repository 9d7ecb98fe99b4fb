"""Tests for amber_pipeline.comparison and its CLI: every number against an independent computation.

Independent references (test-only dependencies: statsmodels, scipy):
* Agresti-Min -> the Wald interval on the 2x2 table with 0.5 added to each cell, written from cell
  proportions with scipy's normal quantile.
* exact McNemar -> statsmodels ``mcnemar(exact=True)`` and ``scipy.stats.binomtest``.
* mean Reward difference -> ``scipy.stats.bootstrap`` (percentile) on per-Task differences computed
  here, within Monte-Carlo tolerance.
* q-values -> statsmodels ``multipletests(method="fdr_bh")``.
* ranks -> a small board worked by hand against statsmodels Wilson intervals.
* detectable change -> Connor's power formula evaluated with scipy at the returned change, and the
  inverse through ``tasks_needed``.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import typer
from scipy.stats import binomtest, bootstrap, norm
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint
from typer.testing import CliRunner

from amber_pipeline.analysis import plan as planning
from amber_pipeline.analysis import sources
from amber_pipeline.analysis import statistics as st
from amber_pipeline.analysis.compare import compare, compare_many
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.leaderboard import leaderboard, load_board
from amber_pipeline.analysis.plan import TasksNeeded, plan
from amber_pipeline.cli.app import app
from amber_pipeline.errors import AmberError
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ev(task: str, reward: float | None = 1.0, *, agent: str = "terminus-2", model: str | None = "m1",
       attempt: int = 1, errored: bool = False, cost: float | None = 0.01, source: str = "job-a",
       started: datetime | None = None, output_tokens: int | None = 100) -> TrialEvidence:
    return TrialEvidence(
        source=source, trial_name=f"{task}__{attempt}", task_name=task, agent=agent, model=model, attempt=attempt,
        reward=reward, errored=errored, exception_type=None, started_at=started or T0 + timedelta(minutes=attempt),
        finished_at=None, agent_duration_sec=10.0, agent_timeout_sec=600.0, input_tokens=1000,
        output_tokens=output_tokens, cost_usd=cost, model_used=True, trajectory_steps=3,
        trajectory_ended_with_error=False, repeated_tool_error=False, tests_passed=None, tests_total=None,
        trial_dir=None)


def sides(n: int, improved: int, regressed: int, both: int = 0, *, base_route: tuple[str, str] = ("terminus-2", "m1"),
          cand_route: tuple[str, str] | None = None, cost: tuple[float, float] = (0.01, 0.01),
          ) -> tuple[list[TrialEvidence], list[TrialEvidence]]:
    """n paired Tasks: `improved` fail->pass, `regressed` pass->fail, `both` pass on both, the rest fail."""
    ca = cand_route or base_route
    base, cand = [], []
    for i in range(n):
        b = i >= improved and i < improved + regressed + both
        c = i < improved or improved + regressed <= i < improved + regressed + both
        base.append(ev(f"t{i:04d}", float(b), agent=base_route[0], model=base_route[1], cost=cost[0]))
        cand.append(ev(f"t{i:04d}", float(c), agent=ca[0], model=ca[1], cost=cost[1], source="job-b"))
    return base, cand


def agresti_min_by_hand(b: int, c: int, n: int) -> tuple[float, float]:
    m = n + 2
    p12, p21 = (b + 0.5) / m, (c + 0.5) / m  # the two discordant cells after adding 0.5 to all four
    d = p12 - p21
    se = math.sqrt((p12 + p21 - d * d) / m)
    z = norm.ppf(0.975)
    return max(-1.0, d - z * se) * 100, min(1.0, d + z * se) * 100


# ---- compare -----------------------------------------------------------------------------------

def test_compare_numbers_against_independent_computations() -> None:
    b, c, n, both = 9, 3, 40, 15
    base, cand = sides(n, b, c, both, cost=(0.02, 0.05))
    r = compare(base, cand)
    assert r.paired_cases == n and r.pairing == "task_and_route"
    assert r.baseline_rate_percent == pytest.approx(100 * (c + both) / n)
    assert r.candidate_rate_percent == pytest.approx(100 * (b + both) / n)
    assert r.difference_points == pytest.approx(100 * (b - c) / n)
    assert r.difference_ci95 == pytest.approx(agresti_min_by_hand(b, c, n), abs=1e-9)
    table = [[both, c], [b, n - b - c - both]]  # rows baseline pass/fail, columns candidate pass/fail
    assert r.p_value == pytest.approx(mcnemar(table, exact=True).pvalue, abs=1e-12)
    assert r.p_value == pytest.approx(binomtest(b, b + c, 0.5).pvalue, abs=1e-12)
    psi = (b + c) / n
    d = r.detectable_change_points / 100
    connor = norm.cdf((d * math.sqrt(n) - norm.ppf(0.975) * math.sqrt(psi)) / math.sqrt(psi - d * d))
    assert connor == pytest.approx(0.8, abs=1e-6)
    assert r.flip_share_percent == pytest.approx(100 * psi)
    assert [x.task for x in r.improved_cases] == [f"t{i:04d}" for i in range(b)]
    assert [x.task for x in r.regressed_cases] == [f"t{i:04d}" for i in range(b, b + c)]
    assert all(x.route == "terminus-2/m1" for x in r.improved_cases + r.regressed_cases)
    assert r.cost_usd.model_dump() == pytest.approx({"baseline": 0.02 * n, "candidate": 0.05 * n})
    assert r.verdict == st.verdict(tuple(r.difference_ci95), None)
    assert r.advice == st.advice(r.verdict, 0.02 * n, 0.05 * n, None, tuple(r.difference_ci95))
    assert r.margin_points is None
    json.dumps(r.model_dump(mode="json"), allow_nan=False)


def test_latest_scored_attempt_decides_and_unscored_attempts_are_skipped() -> None:
    base = [ev("t1", 1.0, attempt=1), ev("t1", 0.0, attempt=2), ev("t1", None, attempt=3, errored=True),
            ev("t2", 0.0, attempt=1), ev("t2", 1.0, attempt=2, output_tokens=0)]  # t2's 2nd: model gave nothing
    cand = [ev("t1", 1.0, source="b"), ev("t2", 1.0, source="b")]
    r = compare(base, cand)
    assert r.baseline_rate_percent == 0.0 and r.candidate_rate_percent == 100.0
    assert {x.task for x in r.improved_cases} == {"t1", "t2"}
    # costs count every attempt on the paired Tasks, scored or not
    assert r.cost_usd.baseline == pytest.approx(0.05)
    assert any("attempts per paired case" in c for c in r.caveats)


def test_mean_reward_difference_against_scipy_bootstrap() -> None:
    rng = np.random.default_rng(7)
    base, cand, diffs = [], [], []
    for i in range(60):
        rb, rc = rng.random(3) < 0.45, rng.random(3) < 0.6
        k = 1 + i % 3
        base += [ev(f"t{i}", float(x), attempt=a + 1) for a, x in enumerate(rb[:k])]
        cand += [ev(f"t{i}", float(x), attempt=a + 1, source="b") for a, x in enumerate(rc[:k])]
        diffs.append(rc[:k].mean() - rb[:k].mean())
    base.append(ev("t0", None, attempt=9, errored=True))  # Errored: never averaged as 0
    mrd = compare(base, cand).mean_reward_difference
    assert mrd.n_shared_tasks == 60
    assert mrd.mean == pytest.approx(float(np.mean(diffs)), abs=1e-12)
    ref = bootstrap((np.array(diffs),), np.mean, n_resamples=10_000, method="percentile", confidence_level=0.95,
                    random_state=np.random.default_rng(1)).confidence_interval
    assert mrd.ci95 == pytest.approx([ref.low, ref.high], abs=0.012)
    assert mrd.too_close_to_call == (ref.low <= 0 <= ref.high)


@pytest.mark.parametrize(("b", "c", "n", "margin", "expected"), [
    (20, 0, 40, None, "better"), (20, 0, 40, 5.0, "better"),
    (0, 20, 40, None, "worse"), (0, 20, 40, 5.0, "worse"),
    (1, 1, 200, None, "no measurable difference"), (1, 1, 200, 5.0, "equivalent"),
    (8, 2, 60, 5.0, "not worse"), (2, 8, 60, 5.0, "not better"),
    (5, 5, 20, None, "no measurable difference"), (5, 5, 20, 5.0, "inconclusive"),
])
def test_verdicts_with_and_without_margin(b: int, c: int, n: int, margin: float | None, expected: str) -> None:
    r = compare(*sides(n, b, c), margin_points=margin)
    assert r.verdict == expected
    low, high = agresti_min_by_hand(b, c, n)  # the table of spec 4, read off the hand-made interval
    m = margin
    by_hand = ("better" if low > 0 else "worse" if high < 0 else "no measurable difference" if m is None
               else "equivalent" if -m < low and high < m else "not worse" if low > -m
               else "not better" if high < m else "inconclusive")
    assert by_hand == expected
    assert r.margin_points == margin


def test_likely_not_proved_caveat() -> None:
    r = compare(*sides(20, 5, 0))
    assert r.verdict == "better" and r.p_value == pytest.approx(0.0625)
    assert any("likely, not proved" in c for c in r.caveats)
    r = compare(*sides(40, 20, 0))
    assert not any("likely, not proved" in c for c in r.caveats)


@pytest.mark.parametrize(("margin", "fragment"), [(5.0, "is smaller than the 5-point margin"),
                                                  (3.0, "may be smaller than the 3-point margin"), (1.0, None)])
def test_margin_caveat_for_a_gain(margin: float, fragment: str | None) -> None:
    r = compare(*sides(1000, 30, 0), margin_points=margin)  # interval about [1.9, 4.1] points
    assert r.verdict == "better"
    low, high = r.difference_ci95
    assert 1 < low < 3 < high < 5
    margin_caveats = [c for c in r.caveats if "margin" in c]
    assert len(margin_caveats) == (0 if fragment is None else 1)
    if fragment:
        assert fragment in margin_caveats[0] and "gain" in margin_caveats[0]


def test_margin_caveat_for_a_loss() -> None:
    r = compare(*sides(1000, 0, 30), margin_points=3.0)
    assert r.verdict == "worse"
    high = agresti_min_by_hand(0, 30, 1000)[1]
    assert any(f"loss may be smaller than the 3-point margin: the interval ends at {high:+.1f} points." in c
               for c in r.caveats)


@pytest.mark.parametrize(("cand_route", "fragment"), [
    (("terminus-2", "m2"), "differ in Model (m1 vs m2) with the same Agent"),
    (("other-agent", "m1"), "differ in Agent (terminus-2 vs other-agent) with the same Model"),
    (("other-agent", "m2"), "differ in both Agent and Model"),
])
def test_paired_by_task_when_no_route_is_shared(cand_route: tuple[str, str], fragment: str) -> None:
    r = compare(*sides(30, 6, 1, 10, cand_route=cand_route))
    assert r.pairing == "task" and r.paired_cases == 30
    assert any("paired by Task only" in c for c in r.caveats)
    assert sum(fragment in c for c in r.caveats) == 1
    assert r.improved_cases[0].route == f"terminus-2/m1 -> {cand_route[0]}/{cand_route[1]}"
    assert r.routes.model_dump() == {"baseline": ["terminus-2/m1"], "candidate": ["/".join(cand_route)]}


def test_shared_route_pairs_by_task_and_route_with_a_test_per_route() -> None:
    b1, c1 = sides(30, 8, 1)
    b2, c2 = sides(30, 2, 2, 5, base_route=("terminus-2", "m2"))
    r = compare(b1 + b2, c1 + c2)
    assert r.pairing == "task_and_route" and r.paired_cases == 60
    assert not any("paired by Task only" in c or "differ in" in c for c in r.caveats)
    assert r.p_value == pytest.approx(binomtest(10, 13, 0.5).pvalue)
    per = {x.route: x for x in r.per_route}
    assert per["terminus-2/m1"].p_value == pytest.approx(binomtest(8, 9, 0.5).pvalue)
    assert per["terminus-2/m2"].p_value == pytest.approx(1.0)
    assert per["terminus-2/m2"].difference_ci95 == pytest.approx(agresti_min_by_hand(2, 2, 30))
    assert r.mean_reward_difference.n_shared_tasks == 60  # one per case, not per Task name


def test_several_routes_per_side_without_a_shared_one_needs_route() -> None:
    b1, _ = sides(10, 2, 1)
    b2, _ = sides(10, 2, 1, base_route=("terminus-2", "m2"))
    _, c = sides(10, 2, 1, cand_route=("terminus-2", "m3"))
    with pytest.raises(AmberError, match="the baseline has 2 .*choose one route per side with --route"):
        compare(b1 + b2, c)
    r = compare(b1 + b2, c, route="terminus-2/m2", candidate_route="terminus-2/m3")
    assert r.pairing == "task" and r.routes.baseline == ["terminus-2/m2"]
    with pytest.raises(AmberError, match="no Trial on route 'x/y'.*terminus-2/m1, terminus-2/m2"):
        compare(b1 + b2, c, route="x/y")


def test_routes_on_one_side_only_are_left_out_with_a_caveat() -> None:
    b1, c1 = sides(10, 3, 0)
    b2, _ = sides(10, 1, 1, base_route=("terminus-2", "m2"))
    r = compare(b1 + b2, c1)
    assert r.paired_cases == 10
    assert any("left out of the pairing: terminus-2/m2" in c for c in r.caveats)
    assert any("10 cases scored on one side only" in c for c in r.caveats)


def test_compare_errors() -> None:
    base, cand = sides(10, 2, 1)
    with pytest.raises(AmberError, match="margin must be above 0 and at most 100"):
        compare(base, cand, margin_points=0)
    with pytest.raises(AmberError, match="candidate has no scored Trial"):
        compare(base, [ev("t0000", None, errored=True)])
    with pytest.raises(AmberError, match="no scored Task in common"):
        compare(base, [ev("elsewhere", 1.0, model="m9")])


def test_advice_compares_costs_on_paired_tasks() -> None:
    r = compare(*sides(60, 8, 2), margin_points=5.0)  # not worse
    assert r.verdict == "not worse"
    cheaper = compare(*sides(60, 8, 2, cost=(0.10, 0.01)), margin_points=5.0)
    assert cheaper.advice.startswith("Adopt the candidate")
    dearer = compare(*sides(60, 8, 2, cost=(0.01, 0.10)), margin_points=5.0)
    assert dearer.advice.startswith("Add cases")
    assert r.advice.startswith("Add cases")  # same cost, not worse


def test_compare_many_q_values_against_statsmodels() -> None:
    base = sides(50, 0, 0)[0]  # every Task fails: a candidate solving k Tasks has b = k, c = 0
    cands = {"a": sides(50, 6, 0)[1], "b": sides(50, 1, 0)[1], "c": sides(50, 2, 0)[1], "d": sides(50, 12, 0)[1]}
    r = compare_many(base, cands)
    ps = [r.comparisons[k].p_value for k in "abcd"]
    assert ps == pytest.approx([2 / 2**6, 1.0, 0.5, 2 / 2**12])
    expected = multipletests(ps, method="fdr_bh")[1]
    assert [r.comparisons[k].q_value for k in "abcd"] == pytest.approx(list(expected))
    assert r.n_comparisons == 4
    a = r.comparisons["a"]  # better with p < 0.05, but q >= 0.05
    assert a.verdict == "better" and a.p_value < 0.05 <= a.q_value
    assert any("Benjamini-Hochberg q = 0.0625 is not below 0.05" in c for c in a.caveats)
    assert not any("Benjamini-Hochberg" in c for c in r.comparisons["d"].caveats)
    with pytest.raises(AmberError, match="No candidate"):
        compare_many(base, {})


# ---- leaderboard -------------------------------------------------------------------------------

BOARD = [{"agent": f"a{i}", "model": f"m{i}", "pass_rate": rate, "trials_per_task": 5}
         for i, rate in enumerate([90, 80, 70, 50, 30, 20])]


def round_of(solved: int, failed: int, unscored: int = 0) -> list[TrialEvidence]:
    out = [ev(f"s{i}", 1.0) for i in range(solved)] + [ev(f"f{i}", 0.0) for i in range(failed)]
    return out + [ev(f"u{i}", None, errored=True) for i in range(unscored)]


def test_leaderboard_ranks_by_hand() -> None:
    r = leaderboard(round_of(6, 4, 1), BOARD, all_tasks=12)
    # Wilson 95% for 6/10 is [31.3, 83.2]: rows above 83.2 -> one (90), above 31.3 -> four (90, 80, 70, 50)
    lo, hi = proportion_confint(6, 10, method="wilson")
    assert r.pass_rate_ci95 == pytest.approx([100 * lo, 100 * hi])
    assert r.pass_rate_percent == pytest.approx(60.0)
    assert r.pass_rate_rank == (2, 5)
    # strict: 6/12 = 50%, Wilson [25.4, 74.6]: above 74.6 -> two (90, 80); above 25.4 -> five (all but 20)
    lo, hi = proportion_confint(6, 12, method="wilson")
    assert r.strict_pass_rate_ci95 == pytest.approx([100 * lo, 100 * hi])
    assert r.strict_pass_rate_rank == (3, 6)
    assert r.positions == 7 and r.scored_tasks == 10 and r.all_tasks == 12
    caveats = " ".join(r.caveats)
    assert "6 board rows ran more Trials per Task (up to 5) than this round (1)" in caveats
    assert "carry no intervals" in caveats
    assert "1 attempted Tasks have no scored attempt" in caveats
    assert "Task list was not given" not in caveats


def test_leaderboard_without_task_list_and_task_names() -> None:
    r = leaderboard(round_of(6, 4), BOARD)
    assert r.all_tasks == 10 and any("Task list was not given" in c for c in r.caveats)
    names = [f"s{i}" for i in range(6)] + [f"f{i}" for i in range(4)] + ["x1", "x2"]
    assert leaderboard(round_of(6, 4), BOARD, all_tasks=names).strict_pass_rate_rank == (3, 6)
    with pytest.raises(AmberError, match="outside the given Task list"):
        leaderboard(round_of(6, 4), BOARD, all_tasks=names[1:])
    with pytest.raises(AmberError, match="more than the 5 given"):
        leaderboard(round_of(6, 4), BOARD, all_tasks=5)
    with pytest.raises(AmberError, match="place one at a time with --route"):
        leaderboard(round_of(6, 4) + [ev("s0", 1.0, model="m2")], BOARD)


def test_load_board_csv_and_json(tmp_path: Path) -> None:
    csv_file = tmp_path / "board.csv"
    csv_file.write_text("agent, model, pass_rate, trials_per_task\nA,gpt,61.5%,5\nB,,40,\n")
    rows = load_board(csv_file)
    assert [row.model_dump() for row in rows] == [
        {"agent": "A", "model": "gpt", "pass_rate": 61.5, "trials_per_task": 5},
        {"agent": "B", "model": "", "pass_rate": 40.0, "trials_per_task": None}]
    json_file = tmp_path / "board.json"
    json_file.write_text(json.dumps({"rows": [{"agent": "A", "model": "gpt", "pass_rate": 61.5,
                                               "trials_per_task": 5}]}))
    assert load_board(json_file) == rows[:1]
    r = leaderboard(round_of(6, 4), [row.model_dump() for row in rows])
    assert any("1 board rows do not say how many Trials" in c for c in r.caveats)


@pytest.mark.parametrize(("name", "text", "fragment"), [
    ("board.txt", "agent,model,pass_rate\n", "must be a .csv or .json file"),
    ("board.json", "[{", "is not valid JSON (line 1"),
    ("board.json", '{"agent": "A"}', "must hold a JSON list of row objects"),
    ("board.json", "[]", "has no rows"),
    ("board.csv", "", "is empty: give a header row"),
    ("board.csv", "agent,pass_rate\nA,50\n", "row 1 has no model"),
    ("board.csv", "agent,model,pass_rate\nA,m,high\n", "row 1 has pass_rate 'high': give a percent from 0 to 100"),
    ("board.csv", "agent,model,pass_rate\nA,m,50\nB,m,120\n", "row 2 has pass_rate '120'"),
    ("board.csv", "agent,model,pass_rate\nA,m,0.5\nB,m,0.3\n", "not proportions"),
    ("board.csv", "agent,model,pass_rate,trials_per_task\nA,m,50,0\n", "trials_per_task '0'"),
    ("board.csv", "agent,model,pass_rate\nA,m,50,9\n", "row 1 has more fields than the header"),
    ("board.csv", "agent,model,pass_rate\n,m,50\n", "row 1 has an empty agent"),
])
def test_malformed_boards_get_one_sentence(tmp_path: Path, name: str, text: str, fragment: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(AmberError) as e:
        load_board(path)
    message = str(e.value)
    assert fragment in message and "\n" not in message and message.endswith(".")


def test_missing_board_file(tmp_path: Path) -> None:
    with pytest.raises(AmberError, match="No board file at"):
        load_board(tmp_path / "nope.csv")


# ---- plan and the Quote's detectable change ----------------------------------------------------

def test_plan_numbers_and_their_inverse() -> None:
    r = plan(100, attempts=3, rate=0.6, flip_share=0.2, delta_points=10)
    same, other = r.detectable_change_points.same_tasks, r.detectable_change_points.other_tasks
    assert same == pytest.approx(st.paired_detectable_change_points(100, 0.2))
    assert other == pytest.approx(st.detectable_change_points(0.6, 100))
    d, psi = same / 100, 0.2  # Connor's power by hand: exactly 80% at 100 Tasks, less at 99
    power = [norm.cdf((d * math.sqrt(k) - norm.ppf(0.975) * math.sqrt(psi)) / math.sqrt(psi - d * d))
             for k in (99, 100)]
    assert power[0] < 0.8 and power[1] == pytest.approx(0.8, abs=1e-9)
    assert st.tasks_needed(same, flip_share=0.2) in (100, 101)  # the closed form's ceil may round 100.0000001 up
    assert st.tasks_needed(same + 0.01, flip_share=0.2) == 100
    assert st.tasks_needed(other, rate=0.6) <= 100
    assert st.detectable_change_points(0.6, st.tasks_needed(other, rate=0.6)) <= other + 1e-6
    assert r.tasks_needed == TasksNeeded(same_tasks=st.tasks_needed(10, flip_share=0.2),
                                         other_tasks=st.tasks_needed(10, rate=0.6))
    assert r.trials_per_side == 300
    assert "Attempts per Task (3) do not change these numbers" in r.notes[0]
    assert r.detectable_change_points == plan(100, attempts=1, rate=0.6, flip_share=0.2).detectable_change_points


def test_plan_impossible_changes_are_notes_not_errors() -> None:
    r = plan(50, flip_share=0.1, delta_points=15)
    assert r.tasks_needed.same_tasks is None and r.tasks_needed.other_tasks is not None
    assert any("can't happen on the same Tasks when only 10% of results flip" in n for n in r.notes)
    r = plan(1, rate=0.5, flip_share=1.0)
    assert r.detectable_change_points.same_tasks is None
    json.dumps(r.model_dump(mode="json"), allow_nan=False)


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"n_tasks": 0}, "at least 1 Task"), ({"n_tasks": 10, "attempts": 0}, "Attempts per Task"),
    ({"n_tasks": 10, "rate": 1.5}, "pass rate must be from 0% to 100%, got 150%"),
    ({"n_tasks": 10, "flip_share": 0.0}, "flip share must be above 0%"),
    ({"n_tasks": 10, "delta_points": 0.0}, "change must be above 0"),
])
def test_plan_bad_arguments(kwargs: dict, fragment: str) -> None:
    with pytest.raises(AmberError, match=fragment):
        plan(**kwargs)


def test_quote_detectable_change() -> None:
    assert planning.quote_detectable_change(89) == pytest.approx(st.detectable_change_points(0.5, 89))
    assert f"about {st.detectable_change_points(0.5, 89):.0f} points" in planning.detectable_change_sentence(89)
    assert math.isnan(planning.quote_detectable_change(1))
    assert "add Tasks" in planning.detectable_change_sentence(1)


# ---- CLI -----------------------------------------------------------------------------------------

@pytest.fixture
def cli(amber_home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[typer.Typer, dict[str, list[TrialEvidence]]]:
    """The `amber` app on a temporary AMBER_HOME whose sources are the given evidence."""
    found: dict[str, list[TrialEvidence]] = {}

    def load_source(w: Warehouse, workspace: str, source: str) -> list[TrialEvidence]:
        assert w.paths == AmberPaths.from_env() and workspace == "default"
        if source not in found:
            raise AmberError(f"No source {source}.")
        return found[source]

    monkeypatch.setattr(sources, "load", load_source)
    base, cand = sides(40, 9, 2, 15, cost=(0.02, 0.01))
    found.update({"job-a": base, "job-b": cand, "job-c": sides(40, 3, 3, 15)[1]})
    return app, found


def run(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    """Exit code, standard output, standard error."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_cli_compare_text_ends_with_advice_and_costs(cli: tuple) -> None:
    app, _ = cli
    code, out, err = run(app, "compare", "job-a", "job-b", "--margin-points", "5")
    assert code == 0, (out, err)
    lines = out.strip().splitlines()
    assert lines[0] == "job-b vs job-a: 40 paired cases, paired by Task and route"
    assert lines[-2].strip().startswith(("Adopt", "Keep", "Add cases"))
    assert lines[-1].strip() == "Cost on the paired Tasks: baseline $0.80, candidate $0.40."
    assert "exact McNemar p = 0.0654" in out


def test_cli_compare_json_and_several_candidates(cli: tuple) -> None:
    app, sources = cli
    code, out, _ = run(app, "compare", "job-a", "job-b", "--json")
    data = json.loads(out)
    assert code == 0 and data["candidate"] == "job-b"
    assert data["p_value"] == pytest.approx(compare(sources["job-a"], sources["job-b"]).p_value)
    code, out, _ = run(app, "compare", "job-a", "job-b", "job-c", "--json")
    data = json.loads(out)
    ps = [data["comparisons"][k]["p_value"] for k in ("job-b", "job-c")]
    assert [data["comparisons"][k]["q_value"] for k in ("job-b", "job-c")] == pytest.approx(
        list(multipletests(ps, method="fdr_bh")[1]))
    code, out, _ = run(app, "compare", "job-a", "job-b", "job-c")
    assert code == 0 and "Benjamini-Hochberg q" in out and "job-c vs job-a" in out


def test_cli_compare_routes_per_side(cli: tuple) -> None:
    app, sources = cli
    b1, _ = sides(20, 0, 0, 10)
    _, c2 = sides(20, 6, 0, 10, cand_route=("terminus-2", "m2"))
    sources["job-x"] = b1 + c2  # one Job, two cells
    code, out, err = run(app, "compare", "job-x", "job-x", "--route", "terminus-2/m1", "--route", "terminus-2/m2",
                         "--json")
    assert code == 0, (out, err)
    data = json.loads(out)
    assert data["pairing"] == "task" and data["paired_cases"] == 20 and len(data["improved_cases"]) == 6
    code, _, err = run(app, "compare", "job-a", "job-b", "--route", "a", "--route", "b", "--route", "c")
    assert code == 1 and "once per side (2 here, baseline first), not 3 times" in err
    code, out, _ = run(app, "compare", "job-x", "job-x", "--json")  # without --route: each cell with itself
    data = json.loads(out)
    assert data["pairing"] == "task_and_route" and data["paired_cases"] == 40 and data["p_value"] == 1.0
    sources["job-y"] = sides(20, 1, 1, cand_route=("terminus-2", "m3"))[1]
    code, _, err = run(app, "compare", "job-x", "job-y")
    assert code == 1 and "choose one route per side with --route" in err


def test_cli_leaderboard(cli: tuple, tmp_path: Path) -> None:
    app, sources = cli
    sources["round"] = round_of(6, 4, 1)
    board = tmp_path / "board.json"
    board.write_text(json.dumps(BOARD))
    code, out, err = run(app, "leaderboard", "round", "--board", str(board), "--total-tasks", "12", "--json")
    assert code == 0, (out, err)
    data = json.loads(out)
    assert data["pass_rate_rank"] == [2, 5] and data["strict_pass_rate_rank"] == [3, 6]
    code, out, _ = run(app, "leaderboard", "round", "--board", str(board), "--total-tasks", "12")
    assert "pass rate 60.0% [31.3, 83.2] -> rank 2 to 5 of 7" in out
    assert "strict pass rate 50.0% [25.4, 74.6] -> rank 3 to 6 of 7" in out
    (tmp_path / "bad.csv").write_text("agent,model\nA,m\n")
    code, _, err = run(app, "leaderboard", "round", "--board", str(tmp_path / "bad.csv"))
    assert code == 1 and "row 1 has no pass_rate" in err


def test_cli_plan(cli: tuple) -> None:
    app, _ = cli
    code, out, _ = run(app, "plan", "--tasks", "100", "--rate", "60", "--flip-share", "20", "--change", "10",
                       "--json")
    assert code == 0
    assert json.loads(out) == plan(100, rate=0.6, flip_share=0.2, delta_points=10).model_dump(mode="json")
    code, out, _ = run(app, "plan", "--tasks", "100", "--attempts", "3", "--change", "10")
    assert code == 0 and "A round of 100 Tasks (3 attempts each, 300 Trials per side)" in out
    assert "note: Attempts per Task (3) do not change these numbers" in " ".join(out.split())


@pytest.mark.parametrize(("args", "fragment"), [
    ([], "Give the number of Tasks in the round with --tasks N."),
    (["--tasks", "0"], "A round needs at least 1 Task, got 0."),
    (["--tasks", "10", "--rate", "150"], "--rate is a percent from 0 to 100, got 150."),
    (["--tasks", "10", "--flip-share", "0"], "The flip share must be above 0% and at most 100%, got 0%."),
    (["--tasks", "10", "--attempts", "0"], "Attempts per Task must be at least 1, got 0."),
    (["--tasks", "10", "--change", "-5"], "The change must be above 0 and at most 100 points, got -5."),
])
def test_cli_plan_bad_arguments(cli: tuple, args: list[str], fragment: str) -> None:
    app, _ = cli
    code, _, err = run(app, "plan", *args)
    assert code == 1 and err.strip() == f"amber: {fragment}"


def test_cli_compare_plot_marks_zero_and_the_margin(cli: tuple, tmp_path: Path) -> None:
    app, _ = cli
    png = tmp_path / "cmp.png"
    code, out, err = run(app, "compare", "job-a", "job-b", "job-c", "--margin-points", "5", "--plot", str(png))
    assert code == 0, (out, err)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
