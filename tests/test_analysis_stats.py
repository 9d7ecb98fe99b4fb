"""Tests for amber_pipeline.analysis_stats: each function against an independent computation.

Independent references used (test-only dependencies: statsmodels, scipy):
* Wilson -> statsmodels ``proportion_confint(method="wilson")``.
* cluster-robust rate -> statsmodels OLS on a constant, ``cov_type="cluster"``
  (its default CR1 correction G/(G-1) * (N-1)/(N-K); with K = 1 this is G/(G-1)).
* pass@k / pass^k -> brute force over every k-subset of the n attempts.
* two-proportion power -> exact enumeration of the pooled z-test over both
  binomials, itself checked by seeded Monte-Carlo (tolerance 4 MC standard errors);
  detectable change -> statsmodels ``NormalIndPower`` with Cohen's h (sample size
  within 3%, the arcsine vs pooled-z approximation gap) and minimality of the root.
* McNemar power (Connor 1987) -> exact enumeration of the McNemar z-test (checked by seeded
  Monte-Carlo) and of the exact McNemar test; Connor's value lies between the two.
* Agresti-Min -> PropCIs ``diffpropci.mp`` documented output (b=40, c=20, n=160),
  the Wald formula on the 0.5-adjusted 2x2 table written from cell proportions,
  and simulated coverage.
* McNemar exact -> ``scipy.stats.binomtest`` and statsmodels ``mcnemar(exact=True)``.
* BH -> statsmodels ``multipletests(method="fdr_bh")``.
* kappa -> statsmodels ``cohens_kappa`` on the confusion table (scikit-learn is not installed).
* Krippendorff's alpha -> the two published examples of Krippendorff (2011),
  "Computing Krippendorff's Alpha-Reliability" (alpha = 0.095 and 0.743), and a
  pair-enumeration implementation.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import binom, binomtest, norm

from amber_pipeline.analysis import statistics as st

sm_prop = pytest.importorskip("statsmodels.stats.proportion")
import statsmodels.api as sm  # noqa: E402
from statsmodels.stats.contingency_tables import mcnemar  # noqa: E402
from statsmodels.stats.inter_rater import cohens_kappa  # noqa: E402
from statsmodels.stats.multitest import multipletests  # noqa: E402
from statsmodels.stats.power import NormalIndPower  # noqa: E402

Z95 = norm.ppf(0.975)


# --- Wilson -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 30, 117, 1000])
@pytest.mark.parametrize("conf", [0.9, 0.95, 0.99])
def test_wilson_matches_statsmodels(n: int, conf: float) -> None:
    for s in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        if not 0 <= s <= n:
            continue
        ref = sm_prop.proportion_confint(s, n, alpha=1 - conf, method="wilson")
        assert st.wilson_interval(s, n, conf) == pytest.approx(ref, abs=1e-12)
    assert st.wilson_interval(0, n, conf)[0] == 0.0 and st.wilson_interval(n, n, conf)[1] == 1.0


def test_wilson_edges() -> None:
    assert all(math.isnan(x) for x in st.wilson_interval(0, 0))
    with pytest.raises(ValueError):
        st.wilson_interval(3, 2)


# --- cluster-robust attempt rate --------------------------------------------------------------------------


def _statsmodels_cluster(solved: list[int], attempts: list[int]) -> tuple[float, float]:
    y, groups = [], []
    for g, (s, n) in enumerate(zip(solved, attempts, strict=True)):
        y += [1.0] * s + [0.0] * (n - s)
        groups += [g] * n
    fit = sm.OLS(np.array(y), np.ones((len(y), 1))).fit(cov_type="cluster", cov_kwds={"groups": np.array(groups)})
    return float(fit.params[0]), float(fit.bse[0])


@pytest.mark.parametrize(
    ("solved", "attempts"),
    [
        ([3, 0, 5, 2, 1], [5, 5, 5, 5, 5]),
        ([1, 0, 1, 1, 0, 0, 1], [1, 1, 1, 1, 1, 1, 1]),  # one attempt per Task
        ([2, 0, 7, 1], [3, 4, 8, 1]),  # unequal cluster sizes
        ([0, 1], [3, 3]),
        ([1, 2, 0, 3, 4, 1, 0, 2, 3, 1] * 3, [4] * 30),
    ],
)
def test_cluster_robust_matches_statsmodels(solved: list[int], attempts: list[int]) -> None:
    rate, (low, high) = st.cluster_robust_rate(solved, attempts)
    ref_rate, ref_se = _statsmodels_cluster(solved, attempts)
    assert rate == pytest.approx(ref_rate, abs=1e-12)
    assert (low, high) == pytest.approx((max(0.0, rate - Z95 * ref_se), min(1.0, rate + Z95 * ref_se)), abs=1e-10)
    # the factor we rely on: statsmodels' CR1 = G/(G-1) times the plain sandwich
    g, total = len(solved), sum(attempts)
    plain = math.sqrt(sum((s - n * rate) ** 2 for s, n in zip(solved, attempts, strict=True))) / total
    assert ref_se == pytest.approx(math.sqrt(g / (g - 1)) * plain, rel=1e-10)


def test_cluster_robust_edges() -> None:
    rate, ci = st.cluster_robust_rate([2], [5])  # one Task: SE undefined
    assert rate == 0.4 and all(math.isnan(x) for x in ci)
    rate, ci = st.cluster_robust_rate([], [])
    assert math.isnan(rate) and all(math.isnan(x) for x in ci)
    assert st.cluster_robust_rate([3, 2], [3, 2]) == (1.0, (1.0, 1.0))  # all solved: SE 0
    assert st.cluster_robust_rate([0, 0, 0], [2, 1, 4]) == (0.0, (0.0, 0.0))
    assert st.cluster_robust_rate([1, 0, 2], [2, 0, 3]) == st.cluster_robust_rate([1, 2], [2, 3])  # empty Task dropped
    with pytest.raises(ValueError):
        st.cluster_robust_rate([3], [2])


# --- pass@k / pass^k ----------------------------------------------------------------------------------------


def _brute(n: int, c: int, k: int) -> tuple[Fraction, Fraction]:
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    return Fraction(sum(any(s) for s in subsets), len(subsets)), Fraction(sum(all(s) for s in subsets), len(subsets))


def test_pass_at_k_and_hat_k_brute_force() -> None:
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                at, hat = _brute(n, c, k)
                assert st.pass_at_k(n, c, k) == pytest.approx(float(at), abs=1e-12)
                assert st.pass_hat_k(n, c, k) == pytest.approx(float(hat), abs=1e-12)
    assert st.pass_at_k(1, 1, 1) == 1.0 and st.pass_at_k(1, 0, 1) == 0.0  # one attempt
    assert st.pass_hat_k(50, 50, 50) == 1.0 and st.pass_at_k(50, 0, 50) == 0.0
    for bad in [(3, 1, 0), (3, 1, 4), (3, 4, 1), (0, 0, 1)]:
        with pytest.raises(ValueError):
            st.pass_at_k(*bad)


def test_mean_pass_k_over_tasks() -> None:
    pairs = [(5, 0), (5, 5), (4, 1), (6, 3), (3, 2)]
    for k in range(1, 4):
        at = sum(_brute(n, c, k)[0] for n, c in pairs) / len(pairs)
        hat = sum(_brute(n, c, k)[1] for n, c in pairs) / len(pairs)
        assert st.mean_pass_at_k(pairs, k) == pytest.approx(float(at), abs=1e-12)
        assert st.mean_pass_hat_k(pairs, k) == pytest.approx(float(hat), abs=1e-12)
    assert st.mean_pass_at_k(pairs, 1) == pytest.approx(sum(c / n for n, c in pairs) / len(pairs))
    assert math.isnan(st.mean_pass_at_k([], 1)) and math.isnan(st.mean_pass_hat_k([], 1))
    with pytest.raises(ValueError):
        st.mean_pass_at_k(pairs, 4)  # k above the smallest n


# --- power and detectable change ---------------------------------------------------------------------------


def _exact_ztest_power(p1: float, p2: float, n: int) -> float:
    """Rejection probability of the pooled two-sided z-test, by enumerating both binomials."""
    x = np.arange(n + 1)
    x1, x2 = np.meshgrid(x, x, indexing="ij")
    pooled = (x1 + x2) / (2 * n)
    se = np.sqrt(2 * pooled * (1 - pooled) / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, (x2 - x1) / n / se, 0.0)
    return float((np.outer(binom.pmf(x, n, p1), binom.pmf(x, n, p2)) * (np.abs(z) > Z95)).sum())


def _mc_ztest_power(p1: float, p2: float, n: int, reps: int, rng: np.random.Generator) -> float:
    x1, x2 = rng.binomial(n, p1, reps), rng.binomial(n, p2, reps)
    pooled = (x1 + x2) / (2 * n)
    se = np.sqrt(2 * pooled * (1 - pooled) / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, (x2 - x1) / n / se, 0.0)
    return float(np.mean(np.abs(z) > Z95))


@pytest.mark.parametrize(
    ("p1", "p2", "n"), [(0.5, 0.6932, 100), (0.3, 0.4347, 200), (0.1, 0.0327, 400), (0.5, 0.55, 800)]
)
def test_two_proportion_power_vs_exact_and_monte_carlo(p1: float, p2: float, n: int) -> None:
    exact = _exact_ztest_power(p1, p2, n)
    reps = 40_000
    mc = _mc_ztest_power(p1, p2, n, reps, np.random.default_rng(12345))
    assert abs(mc - exact) <= 4 * math.sqrt(exact * (1 - exact) / reps)  # the enumeration is right
    assert abs(st.two_proportion_power(p1, p2, n) - exact) <= 0.01  # normal-approximation error, n >= 100


@pytest.mark.parametrize(("rate", "n"), [(0.5, 100), (0.3, 200), (0.1, 400), (0.8, 1000), (0.05, 1000), (0.5, 30)])
def test_detectable_change(rate: float, n: int) -> None:
    d = st.detectable_change_points(rate, n) / 100
    powers = [st.two_proportion_power(rate, p2, n) for p2 in (rate + d, rate - d) if 0 <= p2 <= 1]
    assert min(powers) == pytest.approx(0.8, abs=1e-9)  # the larger direction sits exactly at the target
    assert all(p >= 0.8 - 1e-9 for p in powers)
    for p2 in (rate + d, rate - d):
        if 0 <= p2 <= 1 and st.two_proportion_power(rate, p2, n) < 0.8 + 1e-6:
            assert st.two_proportion_power(rate, rate + (p2 - rate) * (1 - 1e-4), n) < 0.8  # smallest
            h = abs(2 * math.asin(math.sqrt(p2)) - 2 * math.asin(math.sqrt(rate)))
            n_cohen = NormalIndPower().solve_power(effect_size=h, alpha=0.05, power=0.8, ratio=1.0)
            assert n_cohen == pytest.approx(n, rel=0.03)
            assert _exact_ztest_power(rate, p2, n) == pytest.approx(0.8, abs=0.01)
    assert st.tasks_needed(100 * d + 1e-6, rate=rate) <= n
    assert st.tasks_needed(100 * d * 0.97, rate=rate) > n


def test_detectable_change_edges() -> None:
    assert math.isnan(st.detectable_change_points(0.5, 0))
    top = st.detectable_change_points(1.0, 50)  # only a fall is possible
    assert st.two_proportion_power(1.0, 1.0 - top / 100, 50) == pytest.approx(0.8, abs=1e-9)
    low = st.detectable_change_points(0.02, 50)  # a fall to 0 is undetectable: the rise is reported
    assert st.two_proportion_power(0.02, 0.0, 50) < 0.8
    assert st.two_proportion_power(0.02, 0.02 + low / 100, 50) == pytest.approx(0.8, abs=1e-9)
    assert math.isnan(st.detectable_change_points(0.5, 1))  # one Task: nothing detectable
    assert st.two_proportion_power(0.3, 0.3, 100) == pytest.approx(0.05)


def _paired_test_powers(n: int, psi: float, delta: float) -> tuple[float, float]:
    """Exact rejection probabilities of the McNemar z-test and of the exact McNemar test, by enumeration."""
    z_power = exact_power = 0.0
    share_improved = (psi + delta) / 2 / psi
    for m in range(1, n + 1):  # m discordant pairs, b of them improved
        pm = binom.pmf(m, n, psi)
        b = np.arange(m + 1)
        w = binom.pmf(b, m, share_improved)
        z_power += pm * w[np.abs(2 * b - m) / math.sqrt(m) > Z95].sum()
        exact_power += pm * w[np.minimum(1, 2 * binom.cdf(np.minimum(b, m - b), m, 0.5)) < 0.05].sum()
    return float(z_power), float(exact_power)


@pytest.mark.parametrize(("n", "psi"), [(100, 0.2), (300, 0.1), (60, 0.4), (2000, 0.3)])
def test_paired_power_vs_enumeration_and_monte_carlo(n: int, psi: float) -> None:
    delta = st.paired_detectable_change_points(n, psi) / 100
    assert st.paired_power(delta, psi, n) == pytest.approx(0.8, abs=1e-9)
    z_power, exact_power = _paired_test_powers(n, psi, delta)
    reps = 40_000
    counts = np.random.default_rng(777).multinomial(n, [(psi + delta) / 2, (psi - delta) / 2, 1 - psi], size=reps)
    b, c = counts[:, 0], counts[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(b + c > 0, (b - c) / np.sqrt(b + c), 0.0)
    assert abs(float(np.mean(np.abs(z) > Z95)) - z_power) <= 4 * math.sqrt(z_power * (1 - z_power) / reps)
    # Connor's normal approximation sits between the two real tests: the McNemar z-test has a little more power,
    # the exact (binomial) McNemar test used in reports a little less; both converge to 0.8 as n grows.
    assert exact_power <= 0.8 <= z_power
    assert z_power - 0.8 <= 0.04 and 0.8 - exact_power <= 0.05
    if n >= 1000:
        assert abs(z_power - 0.8) <= 0.01 and abs(exact_power - 0.8) <= 0.02
    needed = st.tasks_needed(100 * delta, flip_share=psi)
    assert needed in (n, n + 1)  # ceil of the closed form inverts the power equation
    assert needed == math.ceil((Z95 * math.sqrt(psi) + norm.ppf(0.8) * math.sqrt(psi - delta**2)) ** 2 / delta**2)


def test_paired_and_planning_edges() -> None:
    assert math.isnan(st.paired_detectable_change_points(0, 0.2))
    assert math.isnan(st.paired_detectable_change_points(100, 0.0))
    assert math.isnan(st.paired_detectable_change_points(1, 0.2))  # one Task
    for kwargs in ({}, {"rate": 0.5, "flip_share": 0.2}, {"flip_share": 0.05}):
        with pytest.raises(ValueError):
            st.tasks_needed(10, **kwargs)  # type: ignore[arg-type]
    assert st.tasks_needed(100, rate=0.0) >= 1


# --- Agresti-Min and McNemar -------------------------------------------------------------------------------


def _adjusted_wald(b: int, c: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """Wald interval for p01 - p10 on the 2x2 table with 0.5 added to each cell (multinomial variance)."""
    # rows: baseline pass/fail; columns: candidate pass/fail. n01 = improved, n10 = regressed.
    table = np.array([[n - b - c, c], [b, 0]], dtype=float) + 0.5
    total = table.sum()
    p = table / total
    diff = (p[0, 0] + p[1, 0]) - (p[0, 0] + p[0, 1])  # candidate rate - baseline rate
    var = (p[1, 0] + p[0, 1] - diff**2) / total
    z = norm.ppf(1 - (1 - conf) / 2)
    return (max(-1.0, diff - z * math.sqrt(var)), min(1.0, diff + z * math.sqrt(var)))


def test_agresti_min_published_and_formula() -> None:
    # PropCIs diffpropci.mp(b=40, c=20, n=160) documents (-0.21601726, -0.03089632), estimate (c-b)/(n+2);
    # in our orientation improved=20, regressed=40.
    assert st.agresti_min_interval(20, 40, 160) == pytest.approx((-0.21601726, -0.03089632), abs=5e-9)
    for b, c, n in [(20, 40, 160), (3, 9, 32), (0, 0, 10), (5, 0, 5), (0, 7, 7), (1, 0, 1), (12, 4, 50)]:
        assert st.agresti_min_interval(b, c, n) == pytest.approx(_adjusted_wald(b, c, n), abs=1e-12)
    assert st.agresti_min_interval(5, 0, 5)[1] == 1.0  # truncated
    assert all(math.isnan(x) for x in st.agresti_min_interval(0, 0, 0))
    with pytest.raises(ValueError):
        st.agresti_min_interval(3, 3, 5)


@pytest.mark.parametrize(("n", "p_imp", "p_reg"), [(30, 0.1, 0.05), (50, 0.2, 0.1), (40, 0.05, 0.05), (100, 0.3, 0.1)])
def test_agresti_min_coverage(n: int, p_imp: float, p_reg: float) -> None:
    reps = 20_000
    counts = np.random.default_rng(2005).multinomial(n, [p_imp, p_reg, 1 - p_imp - p_reg], size=reps)
    cover = np.mean([lo <= p_imp - p_reg <= hi for lo, hi in (st.agresti_min_interval(b, c, n) for b, c, _ in counts)])
    assert 0.93 <= cover <= 0.99  # Agresti & Min report near-nominal, slightly conservative coverage


@pytest.mark.parametrize(("b", "c"), [(0, 0), (0, 1), (3, 3), (2, 9), (10, 1), (25, 14), (0, 40), (120, 95)])
def test_mcnemar_exact(b: int, c: int) -> None:
    p = st.mcnemar_exact_p(b, c)
    if b + c:
        assert p == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=1e-10, abs=1e-300)
    assert p == pytest.approx(mcnemar(np.array([[7, c], [b, 5]]), exact=True).pvalue, rel=1e-10, abs=1e-300)
    assert p == st.mcnemar_exact_p(c, b)


# --- Benjamini-Hochberg ------------------------------------------------------------------------------------


def test_benjamini_hochberg() -> None:
    rng = np.random.default_rng(1995)
    cases = [
        list(rng.uniform(size=20)),
        [0.01, 0.01, 0.04, 0.04, 0.2, 1.0, 0.0],
        [0.5],
        list(rng.uniform(0, 0.05, size=8)) + [0.9, 0.99],
    ]
    for ps in cases:
        assert st.benjamini_hochberg(ps) == pytest.approx(list(multipletests(ps, method="fdr_bh")[1]), abs=1e-12)
    assert st.benjamini_hochberg([]) == []
    with pytest.raises(ValueError):
        st.benjamini_hochberg([0.1, float("nan")])


# --- agreement ---------------------------------------------------------------------------------------------


def _kappa_ref(a: list[str], b: list[str]) -> float:
    cats = sorted(set(a) | set(b))
    table = np.zeros((len(cats), len(cats)))
    for x, y in zip(a, b, strict=True):
        table[cats.index(x), cats.index(y)] += 1
    return float(cohens_kappa(table, return_results=False))


def test_cohen_kappa() -> None:
    rng = np.random.default_rng(1960)
    causes = ["dead_tools", "agent_errors", "agent_timeouts", "early_stops", "other"]
    a = list(rng.choice(causes, 60))
    b = [x if rng.uniform() < 0.7 else str(rng.choice(causes)) for x in a]
    cases = [(a, b), (["x", "y", "x", "y"], ["x", "y", "x", "y"]), (["x", "x", "y"], ["y", "y", "x"]), (["a"], ["b"])]
    for u, v in cases:
        assert st.cohen_kappa(u, v) == pytest.approx(_kappa_ref(u, v), abs=1e-12)
    assert st.cohen_kappa(["x", "y"], ["x", "y"]) == 1.0
    assert math.isnan(st.cohen_kappa(["x", "x", "x"], ["x", "x", "x"]))  # single category: p_e = 1
    assert math.isnan(st.cohen_kappa([], []))
    with pytest.raises(ValueError):
        st.cohen_kappa(["x"], [])


def _alpha_by_pairs(units: list[list[str | None]]) -> float:
    within: list[tuple[str, str, float]] = []
    pool: list[str] = []
    for unit in units:
        vals = [v for v in unit if v is not None]
        if len(vals) < 2:
            continue
        pool += vals
        within += [(vals[i], vals[j], 1 / (len(vals) - 1)) for i, j in itertools.permutations(range(len(vals)), 2)]
    d_o = sum(w for x, y, w in within if x != y) / len(pool)
    d_e = sum(x != y for x, y in itertools.permutations(pool, 2)) / (len(pool) * (len(pool) - 1))
    return 1 - d_o / d_e


def _k2011_reliability_data() -> list[list[str | None]]:
    n = None
    coders = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
        [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
    ]
    return [[None if v is None else str(v) for v in unit] for unit in zip(*coders, strict=True)]


def test_krippendorff_alpha_published_examples() -> None:
    data = _k2011_reliability_data()
    assert round(st.krippendorff_alpha_nominal(data), 3) == 0.743  # Krippendorff (2011), section C
    assert st.krippendorff_alpha_nominal(data) == pytest.approx(_alpha_by_pairs(data), abs=1e-12)
    a = [0, 1, 0, 0, 0, 0, 0, 0, 1, 0]  # section A: two observers, binary, no missing
    b = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]
    two = [[str(x), str(y)] for x, y in zip(a, b, strict=True)]
    assert round(st.krippendorff_alpha_nominal(two), 3) == 0.095
    rng = np.random.default_rng(2011)
    for _ in range(20):
        units = [[str(v) if rng.uniform() > 0.2 else None for v in rng.integers(0, 4, 5)] for _ in range(15)]
        assert st.krippendorff_alpha_nominal(units) == pytest.approx(_alpha_by_pairs(units), abs=1e-12)


def test_krippendorff_alpha_edges() -> None:
    assert math.isnan(st.krippendorff_alpha_nominal([]))
    assert math.isnan(st.krippendorff_alpha_nominal([["a", None], [None, "b"]]))  # nothing pairable
    assert math.isnan(st.krippendorff_alpha_nominal([["a", "a"], ["a", "a", "a"]]))  # one category
    assert st.krippendorff_alpha_nominal([["a", "a"], ["b", "b"]]) == 1.0


# --- verdict, advice, rank ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "margin", "expected"),
    [
        ((1.0, 8.0), 5.0, "better"),  # above zero, straddles +m
        ((1.0, 3.0), 5.0, "better"),  # above zero AND inside (-m, m): better wins
        ((6.0, 9.0), 5.0, "better"),
        ((-8.0, -1.0), 5.0, "worse"),
        ((-3.0, -1.0), 5.0, "worse"),
        ((-4.0, 4.0), 5.0, "equivalent"),
        ((0.0, 4.9), 5.0, "equivalent"),  # touching zero is not better
        ((-4.0, 9.0), 5.0, "not worse"),
        ((-4.0, 5.0), 5.0, "not worse"),  # touching +m reaches it
        ((-9.0, 4.0), 5.0, "not better"),
        ((-5.0, 4.0), 5.0, "not better"),  # touching -m reaches it
        ((-5.0, 0.0), 5.0, "not better"),  # touching zero is not worse
        ((-9.0, 9.0), 5.0, "inconclusive"),
        ((-5.0, 5.0), 5.0, "inconclusive"),
        ((1.0, 8.0), None, "better"),
        ((-8.0, -1.0), None, "worse"),
        ((-4.0, 4.0), None, "no measurable difference"),
        ((0.0, 4.0), None, "no measurable difference"),
        ((-4.0, 0.0), None, "no measurable difference"),
        ((0.0, 0.0), None, "no measurable difference"),
        ((float("nan"), float("nan")), None, "no measurable difference"),
        ((float("nan"), float("nan")), 5.0, "inconclusive"),
        ((-100.0, 100.0), 100.0, "inconclusive"),
    ],
)
def test_verdict_table(interval: tuple[float, float], margin: float | None, expected: str) -> None:
    assert st.verdict(interval, margin) == expected


def test_verdict_rejects_bad_input() -> None:
    for margin in (0.0, -1.0, 101.0):
        with pytest.raises(ValueError):
            st.verdict((-1.0, 1.0), margin)
    with pytest.raises(ValueError):
        st.verdict((2.0, 1.0), 5.0)


@pytest.mark.parametrize(
    ("interval", "margin", "costs", "action"),
    [
        ((-4.0, 9.0), 5.0, (10, 5), "Adopt"),  # cheaper + not worse
        ((-4.0, 4.0), 5.0, (10, 5), "Adopt"),  # cheaper + equivalent
        ((-3.0, -1.0), 5.0, (10, 5), "Adopt"),  # cheaper, worse but within the margin
        ((-9.0, 4.0), 5.0, (10, 5), "Add cases"),  # cheaper + not better
        ((-9.0, -6.0), 5.0, (10, 5), "Keep"),  # cheaper, loses more than the margin
        ((6.0, 9.0), 5.0, (5, 10), "Adopt"),  # dearer, gain clears the margin
        ((1.0, 9.0), 5.0, (5, 10), "Add cases"),  # dearer, better, margin not cleared yet
        ((1.0, 3.0), 5.0, (5, 10), "Keep"),  # dearer, gain smaller than the margin
        ((-4.0, 4.0), 5.0, (5, 10), "Keep"),  # dearer + equivalent
        ((-4.0, 9.0), 5.0, (5, 10), "Add cases"),  # dearer + not worse
        ((1.0, 3.0), 5.0, (10, 10.05), "Adopt"),  # same cost + better
        ((-4.0, 4.0), 5.0, (10, 10), "Keep"),  # same cost + equivalent
        ((-4.0, 9.0), 5.0, (10, 10), "Add cases"),  # same cost + not worse
        ((-9.0, 9.0), 5.0, (10, 1), "Add cases"),  # inconclusive, even when cheaper
        ((-4.0, 4.0), None, (10, 1), "Add cases"),  # no measurable difference
        ((1.0, 3.0), None, (5, 10), "Adopt"),
        ((1.0, 3.0), None, (10, 5), "Adopt"),
        ((-3.0, -1.0), None, (10, 5), "Keep"),
        ((-3.0, -1.0), None, (5, 10), "Keep"),
    ],
)
def test_advice(interval: tuple[float, float], margin: float | None, costs: tuple[float, float], action: str) -> None:
    text = st.advice(st.verdict(interval, margin), costs[0], costs[1], margin, interval)
    assert text.startswith(action) and text.endswith(".") and text.count(".") == 1


def test_advice_rejects_mismatched_verdict() -> None:
    with pytest.raises(ValueError):
        st.advice("equivalent", 1, 1, None, (-1.0, 1.0))
    with pytest.raises(ValueError):
        st.advice("no measurable difference", 1, 1, 5.0, (-1.0, 1.0))


def test_rank_range_vs_scan() -> None:
    board = [0.82, 0.75, 0.75, 0.6, 0.41, 0.33, 0.2]
    for interval in [(0.5, 0.7), (0.75, 0.8), (0.0, 1.0), (0.9, 0.95), (0.1, 0.15), (0.6, 0.6)]:
        ranks = [1 + sum(r > x for r in board) for x in np.linspace(*interval, 2001)]
        assert st.rank_range(interval, board) == (min(ranks), max(ranks))
    assert st.rank_range((0.4, 0.6), []) == (1, 1)
    assert st.rank_range((float("nan"), float("nan")), board) == (1, len(board) + 1)
