"""Statistics behind Amber's evaluation reports (``evaluation-analysis.md`` sections 2-5).

Pure functions on plain numbers, standard library only (``statistics.NormalDist``
for normal quantiles, exact integers for binomial sums). Rates and intervals are
proportions in [0, 1] unless a name ends in ``_points`` (percentage points).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Literal

_N = NormalDist()
NAN = float("nan")
SAME_COST_REL_TOL = 0.01  # costs within 1% of the larger one count as "the same"
Interval = tuple[float, float]
Bounds = tuple[float | None, float | None]  # an interval as a report holds it: [low, high], an undefined end None
Verdict = Literal["better", "worse", "equivalent", "not worse", "not better", "inconclusive",
                  "no measurable difference"]


def defined(x: float) -> float | None:
    """``x``, or None when it is undefined (NaN): what reports print and JSON holds, which has no NaN."""
    return None if math.isnan(x) else x


def defined_interval(low: float, high: float) -> Bounds:
    """An interval as a report holds it: each undefined (NaN) end None."""
    return (defined(low), defined(high))


def percent_interval(lo_hi: Interval, scale: float = 100.0) -> Bounds:
    """A proportion interval in percent (or points), undefined ends as None."""
    return defined_interval(scale * lo_hi[0], scale * lo_hi[1])


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return _N.inv_cdf(1.0 - (1.0 - confidence) / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson (1927, JASA 22:209) score interval for a binomial proportion.

    n == 0 -> (nan, nan); 0 successes -> low exactly 0.0; n successes -> high exactly 1.0;
    one attempt -> wide but finite. successes outside [0, n] -> ValueError.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (NAN, NAN)
    z, p = _z(confidence), successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (0.0 if successes == 0 else max(0.0, centre - half), 1.0 if successes == n else min(1.0, centre + half))


def cluster_robust_rate(
    solved_per_task: Sequence[int], attempts_per_task: Sequence[int], confidence: float = 0.95
) -> tuple[float, Interval]:
    """Attempt pass rate, normal interval from a cluster-robust SE with clusters = Tasks.

    Miller, "Adding error bars to evals" (arXiv:2411.00640), clustered standard errors, with the
    CR1 factor G/(G-1) * (N-1)/(N-K) = G/(G-1) for K = 1 (statsmodels' OLS ``cov_type="cluster"``):
    ``SE^2 = G/(G-1) * sum_g (s_g - n_g rate)^2 / N^2``; interval ``rate +/- z SE`` clipped to [0, 1].
    Tasks with 0 attempts are dropped; no attempts -> (nan, (nan, nan)); one Task -> SE undefined,
    interval (nan, nan); all solved or all failed -> SE 0, degenerate interval (rate, rate).
    """
    if len(solved_per_task) != len(attempts_per_task):
        raise ValueError("solved_per_task and attempts_per_task differ in length")
    pairs = [(s, n) for s, n in zip(solved_per_task, attempts_per_task, strict=True) if n > 0]
    if any(not 0 <= s <= n for s, n in pairs) or any(n < 0 for n in attempts_per_task):
        raise ValueError("each Task needs 0 <= solved <= attempts")
    total = sum(n for _, n in pairs)
    if total == 0:
        return (NAN, (NAN, NAN))
    rate = sum(s for s, _ in pairs) / total
    g = len(pairs)
    if g < 2:
        return (rate, (NAN, NAN))
    se = math.sqrt(g / (g - 1) * sum((s - n * rate) ** 2 for s, n in pairs)) / total
    z = _z(confidence)
    return (rate, (max(0.0, rate - z * se), min(1.0, rate + z * se)))


def _check_nck(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 - C(n-c, k)/C(n, k), n attempts, c solved (Chen et al. 2021, arXiv:2107.03374).

    c = 0 -> 0.0; c > n - k (so c = n) -> 1.0; one attempt -> c. k outside 1..n -> ValueError.
    """
    _check_nck(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k = C(c, k)/C(n, k), all k draws solved (Yao et al. 2024, arXiv:2406.12045).

    c < k (so c = 0) -> 0.0; c = n -> 1.0; k = 1 -> c/n. k outside 1..n -> ValueError.
    """
    _check_nck(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _mean_over_tasks(f: Callable[[int, int, int], float], pairs: Sequence[tuple[int, int]], k: int) -> float:
    return math.fsum(f(n, c, k) for n, c in pairs) / len(pairs) if pairs else NAN


def mean_pass_at_k(pairs: Sequence[tuple[int, int]], k: int) -> float:
    """Mean :func:`pass_at_k` over Tasks, pairs = (n, c); k in 1..min(n) else ValueError; no Tasks -> nan."""
    return _mean_over_tasks(pass_at_k, pairs, k)


def mean_pass_hat_k(pairs: Sequence[tuple[int, int]], k: int) -> float:
    """Mean of :func:`pass_hat_k` over Tasks; same conventions as :func:`mean_pass_at_k`."""
    return _mean_over_tasks(pass_hat_k, pairs, k)


def two_proportion_power(p1: float, p2: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided pooled two-proportion z-test, n per group, normal approximation.

    SE pooled under H0, unpooled under H1, both rejection tails counted (Fleiss, Levin & Paik,
    Statistical Methods for Rates and Proportions, 3rd ed., 4.2). p1 == p2 -> alpha; n == 0 -> nan.
    """
    if n <= 0:
        return NAN
    d, pbar = abs(p2 - p1), (p1 + p2) / 2
    se0, se1 = math.sqrt(2 * pbar * (1 - pbar) / n), math.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / n)
    za = _z(1 - alpha)
    if se1 == 0.0:  # p1, p2 both in {0, 1}: the test rejects for sure iff they differ
        return 1.0 if d > 0 else 0.0
    return _N.cdf((d - za * se0) / se1) + _N.cdf((-d - za * se0) / se1)


def paired_power(delta: float, flip_share: float, n: int, alpha: float = 0.05) -> float:
    """McNemar power for a paired difference delta, Connor (1987, Biometrics 43:207), normal approximation.

    psi = flip_share, the share of pairs whose result differs: power = Phi((|delta| sqrt(n) -
    z_{a/2} sqrt(psi)) / sqrt(psi - delta^2)). |delta| > psi -> ValueError; n == 0 or psi == 0 -> nan.
    """
    if n <= 0 or flip_share <= 0:
        return NAN
    if (d := abs(delta)) > flip_share:
        raise ValueError("a change cannot exceed the flip share")
    sd1 = math.sqrt(max(flip_share - d * d, 0.0))
    num = d * math.sqrt(n) - _z(1 - alpha) * math.sqrt(flip_share)
    if sd1 == 0.0:
        return 1.0 if num > 0 else 0.0
    return _N.cdf(num / sd1)


def _smallest(power_of: Callable[[float], float], upper: float, target: float) -> float:
    """Smallest d in (0, upper] with power_of(d) >= target (grid scan, then bisection); nan if none."""
    if upper <= 0:
        return NAN
    lo = 0.0
    for i in range(1, 1001):
        hi = upper * i / 1000
        if power_of(hi) >= target:
            for _ in range(60):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if power_of(mid) >= target else (mid, hi)
            return hi
        lo = hi
    return NAN


def detectable_change_points(rate: float, n_tasks: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest change (points) that a same-size round on OTHER Tasks detects with the given power.

    :func:`two_proportion_power` solved numerically for a rise and a fall; the larger is returned
    (Miller, arXiv:2411.00640, power). A direction with no room (rate 1 rises, rate 0 falls) or
    that stays undetectable over its whole room is left out; nan if neither or n_tasks == 0 (one
    Task: usually nan).
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError("rate must be a proportion in [0, 1]")
    if n_tasks <= 0:
        return NAN
    rise = _smallest(lambda d: two_proportion_power(rate, rate + d, n_tasks, alpha), 1.0 - rate, power)
    fall = _smallest(lambda d: two_proportion_power(rate, rate - d, n_tasks, alpha), rate, power)
    found = [d for d in (rise, fall) if not math.isnan(d)]
    return 100.0 * max(found) if found else NAN


def paired_detectable_change_points(n_tasks: int, flip_share: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest change (points) detectable on the SAME Tasks when ``flip_share`` of results flip.

    :func:`paired_power` (Connor 1987; Miller arXiv:2411.00640) solved numerically; rise = fall.
    Checked by enumeration: the McNemar z-test has slightly more power than this, the exact test
    slightly less (about 0.76-0.79 at n = 60-300). nan when n_tasks == 0, flip_share == 0, or
    not even delta = flip_share is detectable (e.g. one Task).
    """
    if not 0.0 <= flip_share <= 1.0:
        raise ValueError("flip_share must be in [0, 1]")
    if n_tasks <= 0 or flip_share == 0.0:
        return NAN
    return 100.0 * _smallest(lambda x: paired_power(x, flip_share, n_tasks, alpha), flip_share, power)


def tasks_needed(
    delta_points: float,
    rate: float | None = None,
    flip_share: float | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
) -> int:
    """Tasks per round needed to detect a change of ``delta_points`` with the given power (spec 5).

    Exactly one of: ``flip_share`` -> (a) same Tasks, Connor (1987) closed form
    ``ceil((z_{a/2} sqrt(psi) + z_b sqrt(psi - d^2))^2 / d^2)``; ``rate`` -> (b) other Tasks, the
    smallest n with :func:`two_proportion_power` >= power for both the rise and the fall (a
    direction leaving [0, 1] is skipped). An impossible change -> ValueError.
    """
    d = delta_points / 100.0
    if (rate is None) == (flip_share is None):
        raise ValueError("give exactly one of rate or flip_share")
    if not 0.0 < d <= 1.0:
        raise ValueError("delta_points must be in (0, 100]")
    za, zb = _z(1 - alpha), _N.inv_cdf(power)
    if flip_share is not None:
        if not d <= flip_share <= 1.0:
            raise ValueError("the change cannot exceed the flip share")
        return max(1, math.ceil((za * math.sqrt(flip_share) + zb * math.sqrt(flip_share - d * d)) ** 2 / d**2))
    assert rate is not None
    targets = [p2 for p2 in (rate + d, rate - d) if 0.0 <= p2 <= 1.0]
    if not targets:
        raise ValueError("no rise or fall of that size fits in [0, 1]")
    needed = 1
    for p2 in targets:  # power rises with n: double, then bisect to the smallest n that reaches it
        lo, hi = 0, 1
        while two_proportion_power(rate, p2, hi, alpha) < power:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if two_proportion_power(rate, p2, mid, alpha) >= power else (mid, hi)
        needed = max(needed, hi)
    return needed


def agresti_min_interval(b: int, c: int, n: int, confidence: float = 0.95) -> Interval:
    """Candidate - baseline paired difference, Agresti & Min (2005, Stat Med 24:729) "Wald+2" interval.

    b = improved (baseline 0 -> candidate 1), c = regressed (1 -> 0), n = paired cases.
    0.5 is added to each of the four cells, then the Wald interval: ``d = (b - c)/(n + 2)``,
    ``SE = sqrt(b + c + 1 - (b - c)^2/(n + 2)) / (n + 2)``, truncated to [-1, 1] as in
    PropCIs ``diffpropci.mp``. n == 0 -> (nan, nan); b = c = 0 -> finite, centred on 0.
    """
    if b < 0 or c < 0 or b + c > n:
        raise ValueError(f"need b, c >= 0 and b + c <= n, got b={b} c={c} n={n}")
    if n == 0:
        return (NAN, NAN)
    m = n + 2
    diff = (b - c) / m
    se = math.sqrt((b + c + 1) - (b - c) ** 2 / m) / m
    z = _z(confidence)
    return (max(-1.0, diff - z * se), min(1.0, diff + z * se))


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p = min(1, 2 P(X <= min(b, c))), X ~ Bin(b + c, 1/2); b + c == 0 or b == c -> 1.0."""
    if b < 0 or c < 0:
        raise ValueError("counts must be >= 0")
    m = b + c
    tail = sum(math.comb(m, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**m)


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini & Hochberg (1995) q-values ``q_(i) = min_{j>=i} p_(j) m / j``, capped at 1, input order.

    Empty -> []; one p-value -> itself; a p outside [0, 1] or nan -> ValueError.
    """
    m = len(p_values)
    if any(not 0.0 <= p <= 1.0 for p in p_values):
        raise ValueError("p-values must be in [0, 1]")
    order = sorted(range(m), key=lambda i: p_values[i])
    q = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, p_values[i] * m / rank)
        q[i] = running
    return q


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float:
    """Cohen (1960) kappa for two raters, nominal: (p_o - p_e) / (1 - p_e).

    Choice: when p_e == 1 (both raters used one single category throughout) kappa is 0/0 and
    we return nan, like scikit-learn. Empty input -> nan; unequal lengths -> ValueError.
    """
    if len(a) != len(b):
        raise ValueError("both raters must rate the same items")
    n = len(a)
    if n == 0:
        return NAN
    p_o = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    p_e = sum(ca[k] * cb[k] for k in ca) / (n * n)
    return NAN if p_e == 1.0 else (p_o - p_e) / (1.0 - p_e)


def krippendorff_alpha_nominal(units: Sequence[Sequence[str | None]]) -> float:
    """Krippendorff's alpha, nominal, via the coincidence matrix ("Computing Krippendorff's Alpha-Reliability", 2011).

    A unit lists its coders' values (None = missing); units with < 2 values are unpairable.
    ``o_ck`` adds ``1/(m_u - 1)`` per ordered pair in a unit and
    ``alpha = 1 - (n - 1) sum_{c!=k} o_ck / sum_{c!=k} n_c n_k``. No pairable values -> nan;
    one category overall (no expected disagreement) -> nan.
    """
    observed = 0.0  # sum over c != k of o_ck
    totals: Counter[str] = Counter()
    for unit in units:
        values = [v for v in unit if v is not None]
        m = len(values)
        if m >= 2:
            observed += sum(n_c * (m - n_c) for n_c in Counter(values).values()) / (m - 1)
            totals.update(values)
    n = sum(totals.values())
    expected = n * n - sum(v * v for v in totals.values())  # sum over c != k of n_c n_k
    if n == 0 or expected == 0:
        return NAN
    return 1.0 - (n - 1) * observed / expected


VERDICTS_WITH_MARGIN: tuple[Verdict, ...] = ("better", "worse", "equivalent", "not worse", "not better", "inconclusive")
VERDICTS_WITHOUT_MARGIN: tuple[Verdict, ...] = ("better", "worse", "no measurable difference")


def verdict(interval_points: Interval, margin_points: float | None) -> Verdict:
    """Verdict of a paired comparison from its 95% interval in points (spec 4; margins: Schuirmann 1987).

    First match wins: (1) low > 0 -> better, even if also inside (-m, m); (2) high < 0 -> worse,
    likewise; without a margin anything else -> no measurable difference. With margin m:
    (3) -m < low and high < m -> equivalent; (4) low > -m -> not worse (here high >= m);
    (5) high < m -> not better (here low <= -m); (6) else (low <= -m, high >= m) -> inconclusive.
    Touching a bound reaches it: low == 0 is not better, low == -m is not "not worse".
    A nan interval (no cases) -> inconclusive / no measurable difference. m outside (0, 100]
    or low > high -> ValueError.
    """
    low, high = interval_points
    if margin_points is not None and not 0.0 < margin_points <= 100.0:
        raise ValueError("margin_points must be in (0, 100]")
    if math.isnan(low) or math.isnan(high):
        return "no measurable difference" if margin_points is None else "inconclusive"
    if low > high:
        raise ValueError("interval low must not exceed high")
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    if margin_points is None:
        return "no measurable difference"
    m = margin_points
    if -m < low and high < m:
        return "equivalent"
    if low > -m:
        return "not worse"
    if high < m:
        return "not better"
    return "inconclusive"


def advice(
    verdict: str, cost_baseline: float, cost_candidate: float, margin_points: float | None, interval_points: Interval
) -> str:
    """One plain sentence: adopt the candidate, keep the baseline, or add cases (spec 4b).

    Costs are totals on the paired Tasks, "the same" within 1% of each other. ``inconclusive`` and
    ``no measurable difference`` -> add cases. Otherwise, from the interval (low, high) and margin m:
    cheaper -> adopt when low > -m (not worse), keep when high <= -m, else add cases;
    same cost -> adopt if ``better``, add cases if ``not worse``, else keep;
    dearer -> adopt when low >= m (the gain clears the margin), keep when high < m, else add cases.
    Without a margin: ``better`` -> adopt, ``worse`` -> keep, whatever the cost.
    """
    allowed = VERDICTS_WITHOUT_MARGIN if margin_points is None else VERDICTS_WITH_MARGIN
    if verdict not in allowed:
        raise ValueError(f"verdict {verdict!r} is not one of {allowed} (margin {margin_points})")
    if not (cost_baseline >= 0 and cost_candidate >= 0):
        raise ValueError("costs must be >= 0")
    adopt, keep, more = "Adopt the candidate: ", "Keep the baseline: ", "Add cases: "
    if verdict in ("inconclusive", "no measurable difference"):
        return more + "the difference is not yet measured precisely enough to decide."
    (low, high), m = interval_points, margin_points
    same = math.isclose(cost_candidate, cost_baseline, rel_tol=SAME_COST_REL_TOL, abs_tol=1e-12)
    cost = "the same cost" if same else ("a lower cost" if cost_candidate < cost_baseline else "a higher cost")
    if m is None:
        return (
            adopt + f"it is better, at {cost}." if verdict == "better" else keep + f"the candidate is worse, at {cost}."
        )
    if same:
        if verdict == "better":
            return adopt + "it is better at the same cost."
        if verdict == "not worse":
            return more + "at the same cost it is not worse and may still prove better."
        return keep + "the candidate brings no proven gain at the same cost."
    if cost_candidate < cost_baseline:
        if low > -m:
            return adopt + "it costs less and any loss stays within the margin."
        if high <= -m:
            return keep + "the candidate costs less but loses more than the margin."
        return more + "the candidate costs less, but a loss beyond the margin is not ruled out."
    if low >= m:
        return adopt + "its gain clears the margin, which justifies its higher cost."
    if high < m:
        return keep + "the candidate costs more without a gain that clears the margin."
    return more + "the candidate costs more and a gain that clears the margin is possible but not shown."


def rank_range(rate_interval: Interval, board_rates: Sequence[float]) -> tuple[int, int]:
    """Best and worst possible rank (1 = best) of a round on a board, from its interval (spec 4b).

    Competition ranking: rank = 1 + rows with a strictly higher rate (ties share the better rank);
    best = 1 + #(rate > high), worst = 1 + #(rate > low); same units for both. Empty board -> (1, 1);
    nan interval -> (1, len(board) + 1).
    """
    if any(math.isnan(r) for r in board_rates):
        raise ValueError("board rates must be numbers")
    low, high = rate_interval
    if math.isnan(low) or math.isnan(high):
        return (1, len(board_rates) + 1)
    return (1 + sum(r > high for r in board_rates), 1 + sum(r > low for r in board_rates))
