"""Confidence sequences for a paired difference on a Benchmark Version, for Jobs that stop once it is decided.

A Job runs the Version's N Tasks in one seeded random order, the same for every
cell. After each Task completes in both cells of a pair, its difference
``D = mean Reward of A on the Task - mean Reward of B`` (k attempts per cell,
Rewards in [0, 1]) is in [-1, 1]. This module gives, after every Task, an
interval for the pair's difference that is anytime-valid: it holds at once for
every number of Tasks seen, so the Job may look after each Task and stop when it
likes.

The estimand, and the pitfall it avoids. The difference reported is
``theta = (1/N) sum_i (p_A,i - p_B,i)`` over ALL N Tasks of the Version, where
``p_X,i`` is the EXPECTED Reward of cell X on Task i: the difference the Version
measures with Trial noise averaged out. The Version's Tasks and their expected
Rewards are held fixed; only the order and the Trial outcomes are random. Under
the null "both cells have the same per-Task success probabilities" theta is 0.
The without-replacement (WoR) confidence sequence of Waudby-Smith and Ramdas
(NeurIPS 2020; JRSS-B 86(1), 2024, "Estimating means of bounded random variables
by betting") applied to the observed D targets instead the REALIZED mean R of the
N Tasks' observed differences (what the full Job would print): R = theta + the
mean Trial noise, nonzero under the null, and the WoR interval collapses onto R
as t nears N. In ``bench/sequential.py`` that naive reading stops a null Job with
a "better" verdict 97% (N = 100) to 99% (N = 500) of the time. Routes weighed:
(a) the with-replacement betting CS, valid for the mean of a superpopulation the
Tasks are drawn from, not for this Version, and blind to the finite population;
(b) the WoR CS for R widened by a bound on |R - theta|: a fixed slack of
``sqrt(log(2/alpha_2)/(k N))``, 9 points at N = 200 and k = 3, which wrecks early
stopping; (c), chosen: the WoR CS with the Trial noise accumulated SO FAR bounded
time-uniformly and folded into the WoR centering, as follows.

Construction (differences on [0, 1]: ``y = (D + 1)/2``, back by ``2y - 1``). Let
``e_t`` be the Trial noise of the t-th Task's y (its y minus its expected y) and
``E_t = e_1 + ... + e_t``. Given the Task, y moves with each of the 2k
independent Rewards by at most 1/(2k), so ``e_t`` is sub-Gaussian with variance
proxy ``s2 = 1/(8k)`` (Hoeffding's lemma) and ``exp(l E_t - l^2 t s2/2)`` is a
supermartingale for every l; mixed over ``l ~ N(0, 1/rho)`` (Robbins 1970;
Howard, Ramdas, McAuliffe and Sekhon, Ann. Statist. 49(2), 2021, the normal
mixture) Ville's inequality gives, with ``V_t = t s2``,

    P(exists t: |E_t| >= b_t) <= alpha_2,   b_t = sqrt((V_t + rho) log((V_t + rho) / (rho alpha_2^2))).

As the t-th Task is drawn uniformly from those not yet run and its Trials are
fresh, the conditional mean of the t-th y given the past is the mean expected y
of the Tasks not yet run, ``mu_t = (N m - sum_{j<t} (y_j - e_j)) / (N - t + 1)`` under
the hypothesis theta = 2m - 1; the papers' centering ``m_t = (N m - sum_{j<t} y_j)
/ (N - t + 1)`` is off by ``E_{t-1}/(N - t + 1)``. So on the event G that every
``|E_t| < b_t``, mu_t lies in ``[l_t, u_t] = [m_t - beta_t, m_t + beta_t] cap [0, 1]``
with ``beta_t = b_{t-1}/(N - t + 1)``, and each capital bets against the worst end:

    K+_t(m) = prod_{j<=t} (1 + min(lam_j, c/u_j) (y_j - u_j)),
    K-_t(m) = prod_{j<=t} (1 - min(lam_j, c/(1 - l_j)) (y_j - l_j)),

``lam_j`` the predictable plug-in bet of the 2024 paper (from y_1..y_{j-1} only,
with log(2/alpha_1)), c = 3/4. On G each factor is at most the factor of the
same bet against mu_j, which is a nonnegative martingale (the hedged capital of
the papers), so by Ville's inequality and a union bound
``P(exists t: theta outside C_t) <= alpha_1 + alpha_2 = alpha``, where m is
rejected once ``max(K+/2, K-/2) >= 1/alpha_1`` (the hedged capital), once
``[l_t, u_t]`` is empty, or once it breaks the logical bounds
``(S_t - b_t)/N <= m <= (S_t + b_t + N - t)/N`` (S_t the sum of the y seen), which
hold on G. C_t is the running intersection: the m not rejected at any time <= t.
So for every Version (any fixed p_A,i, p_B,i) and any stopping rule, the interval
at the stop misses theta with chance at most alpha. For noiseless Rewards
(``attempts`` = inf) b = 0, alpha_2 = 0 and C_t is exactly the papers' WoR
hedged betting CS (confseq's ``betting_cs(x, N=N, trunc_scale=3/4)``, without its
grid). At t = N, ``C_N`` lies within ``R +/- b_N / N`` (on the D scale, twice
that): the Version's remaining uncertainty is its Trial noise, which no stopping
rule removes. alpha_2 = alpha/3 (``NOISE_ALPHA_SHARE``), rho and c were tuned on
the bench's simulated Versions; the guarantee holds for any choice made before
the data. The price of holding it for this Version rather than a superpopulation
is the noise band: on 200 Tasks, k = 3, route (a) stops at a median 34% / 16% /
11% of the Trials for 10 / 20 / 30 points, this one at 74% / 18% / 12%. The band
is the worst case (every Task at p = 1/2): nothing here estimates the Trials'
own variance.

Because u_t and l_t rise with m and each factor falls in u (as in the papers),
K+_t(m) never rises and K-_t(m) never falls in m, so C_t is an interval
``(lower, upper)``; each end is found by bisection on m (2^-40) over the running
maximum of the log capital, which costs O(t) per step. Reported ends are
rejected points, so the reported interval contains the exact one. Edge cases: no
Task gives (-1, 1); a constant difference is never excluded; noiseless, t = N
gives the realized mean exactly (so N = 1 gives the one Task's difference).

Assumptions, stated for the Job: the order is uniformly random and fixed before
any outcome; differences enter in THAT order, the longest prefix of Tasks
complete in both cells (not in completion order: quick failures finish first);
Trials are independent given the Task; every Task has ``attempts`` scored Trials
in each cell. Several pairs: each pair's sequence at ``family_alpha(alpha, pairs)``
= alpha / pairs (Bonferroni), so the chance that ANY pair's interval ever misses
its difference is at most alpha.

Verdicts (``verdict``), with a margin M >= 0 (a proportion, M points / 100), in order:
    lower > M and upper < -M (an empty sequence, chance <= alpha)  -> "undecided"
    lower > M                                                        -> "a_better"
    upper < -M                                                       -> "b_better"
    M > 0 and -M < lower and upper < M                               -> "too_close_to_matter"
    otherwise                                                        -> "undecided"
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

Verdict = Literal["a_better", "b_better", "too_close_to_matter", "undecided"]
VERDICTS: tuple[Verdict, ...] = ("undecided", "a_better", "b_better", "too_close_to_matter")  # codes 0..3
ALPHA = 0.05
NOISE_ALPHA_SHARE = 1 / 3  # of alpha, for the Trial-noise bound; the rest for the capital
RHO_SHARE = 0.02  # rho = RHO_SHARE * N * s2: the noise bound is tightest early, where Jobs stop
TRUNCATION = 0.75  # c, the papers' upper choice: a bet is at most c / (the mean bet against); factors >= 1 - c
BISECTIONS = 40  # ends to 2^-40 on [0, 1]: far below any difference a report prints
_CHUNK = 2**22  # values per (jobs x times x Tasks) block when many times are asked at once


@dataclass(frozen=True)
class SequentialState:
    """A pair's interval after ``tasks_seen`` of ``tasks_total`` Tasks, and what it decides.

    ``lower`` and ``upper`` bound the difference A - B as a proportion in [-1, 1] (points / 100).
    """

    lower: float
    upper: float
    tasks_seen: int
    tasks_total: int
    verdict: Verdict


@dataclass(frozen=True)
class SimulatedJobs:
    """Simulated stopped Jobs, one entry per Job: where each stopped, what it decided, whether it covered."""

    tasks_seen: np.ndarray  # Tasks complete in both cells when the Job stopped (tasks_total if never decided)
    verdicts: np.ndarray  # codes into VERDICTS
    covered: np.ndarray  # the interval at the stop contains the Version's expected difference
    estimand: np.ndarray  # that expected difference, a proportion
    tasks_total: int

    def trials_share(self) -> np.ndarray:
        """The share of the full Job's Trials each stopped Job ran (both cells run the same Tasks)."""
        return self.tasks_seen / self.tasks_total


def family_alpha(alpha: float, pairs: int) -> float:
    """Each pair's alpha so that all ``pairs`` comparisons hold together with ``1 - alpha``: alpha / pairs.

    Bonferroni: the chance that any pair's sequence ever misses is at most the sum of theirs. No pair
    (``pairs`` = 0) -> ValueError, as is alpha outside (0, 1).
    """
    _check_alpha(alpha)
    if pairs < 1:
        raise ValueError(f"need at least one pair, got {pairs}")
    return alpha / pairs


def verdict(lower: float, upper: float, margin: float = 0.0) -> Verdict:
    """What an interval ``[lower, upper]`` for A - B decides with a margin (the module's rule table).

    ``margin`` is a proportion (M points / 100), >= 0; a NaN end decides nothing ("undecided").
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    return VERDICTS[int(_verdict_codes(np.asarray(lower > margin), np.asarray(upper < -margin),
                                       np.asarray(margin > 0 and lower > -margin and upper < margin)))]


def confidence_sequence(differences: np.ndarray, n_tasks: int, alpha: float = ALPHA,
                        attempts: float = 1) -> tuple[np.ndarray, np.ndarray]:
    """The interval for A - B after each number of Tasks t = 0..T, running intersection applied.

    ``differences`` (shape (T,) or (jobs, T)) are the per-Task differences in [-1, 1] in the Job's
    random order; ``n_tasks`` is the Version's N >= T; ``attempts`` the scored Trials per cell on each
    Task (``math.inf`` for noiseless Rewards). Returns ``(lower, upper)`` of shape (T + 1,) or
    (jobs, T + 1), index t after t Tasks: t = 0 gives (-1, 1); every later interval lies inside the
    one before. Costs O(T^2) per Job; the latest interval alone is :func:`sequential_state`.
    """
    y, noise = _prepare(differences, n_tasks, alpha, attempts)
    times = np.arange(y.shape[-1] + 1)
    rows = max(1, _CHUNK // max(1, y.shape[0] * y.shape[-1]))
    parts = [_interval_at(y, noise, times[i:i + rows]) for i in range(0, times.size, rows)]
    lower, upper = (np.concatenate([p[j] for p in parts], axis=-1) for j in (0, 1))
    return (lower[0], upper[0]) if np.ndim(differences) == 1 else (lower, upper)


def sequential_state(differences: np.ndarray, n_tasks: int, alpha: float = ALPHA, attempts: float = 1,
                     margin: float = 0.0) -> SequentialState:
    """A pair's interval and verdict after the Tasks given (one Job, in its random order); O(T) per halving.

    ``margin`` is a proportion (M points / 100). No Task yet gives (-1, 1), "undecided".
    """
    y, noise = _prepare(differences, n_tasks, alpha, attempts)
    if y.shape[0] != 1:
        raise ValueError("sequential_state takes one Job's differences, shape (T,)")
    t = y.shape[-1]
    lower, upper = _interval_at(y, noise, np.array([t]))
    low, high = float(lower[0, 0]), float(upper[0, 0])
    return SequentialState(low, high, t, n_tasks, verdict(low, high, margin))


def stopped_jobs(differences: np.ndarray, estimand: np.ndarray, alpha: float = ALPHA, attempts: float = 1,
                 margin: float = 0.0) -> SimulatedJobs:
    """Where Jobs that stop once decided stop, what they decide, and whether they cover ``estimand``.

    ``differences`` (jobs x N) are every Task's difference in each Job's random order, ``estimand``
    (jobs,) each Version's expected difference, ``margin`` a proportion. A Job stops after the first
    Task count whose verdict is not "undecided", else runs all N. The verdicts are those of
    :func:`confidence_sequence` then :func:`verdict`, found in O(N) per Job by testing only the margins:
    an interval decides exactly when it rejects them (lower > M: M rejected from below, and so on).
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    y, noise = _prepare(differences, np.shape(differences)[-1], alpha, attempts)
    jobs, n_tasks = y.shape
    at_margins = _to_unit(np.array([margin, -margin]))[None, :, None]
    below, above = _rejected_by(y, noise, np.broadcast_to(at_margins, (jobs, 2, 1)))
    codes = _verdict_codes(below[:, 0], above[:, 1], below[:, 1] & above[:, 0] & (margin > 0))
    decided = codes != 0
    stop = np.where(decided.any(axis=1), decided.argmax(axis=1), n_tasks - 1)  # index of the last Task run
    rows = np.arange(jobs)
    truth = _to_unit(np.asarray(estimand, dtype=np.float64))
    truth_below, truth_above = _rejected_by(y, noise, truth.reshape(jobs, 1, 1))
    covered = ~(truth_below[rows, 0, stop] | truth_above[rows, 0, stop])
    return SimulatedJobs(stop + 1, codes[rows, stop], covered, truth * 2.0 - 1.0, n_tasks)


def simulate_stopped_jobs(difference_points: float, n_tasks: int, attempts: int = 3, alpha: float = ALPHA,
                          margin_points: float = 0.0, jobs: int = 1000, seed: int = 0) -> SimulatedJobs:
    """:func:`stopped_jobs` on simulated Versions of ``n_tasks`` Tasks whose expected difference is exactly
    ``difference_points``, ``attempts`` Bernoulli Trials per cell and Task (:func:`simulated_differences`)."""
    rng = np.random.default_rng(seed)
    d, theta = simulated_differences(rng, difference_points / 100.0, n_tasks, attempts, jobs)
    return stopped_jobs(d, theta, alpha, attempts, margin_points / 100.0)


def median_trials_share(difference_points: float, n_tasks: int, attempts: int = 3, alpha: float = ALPHA,
                        margin_points: float = 0.0, jobs: int = 1000, seed: int = 0) -> float:
    """The median share of its Trials a stopped Job runs, over simulated Jobs (:func:`simulate_stopped_jobs`)."""
    return float(np.median(simulate_stopped_jobs(difference_points, n_tasks, attempts, alpha, margin_points,
                                                 jobs, seed).trials_share()))


def simulated_differences(rng: np.random.Generator, difference: float, n_tasks: int, attempts: int,
                          jobs: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-Task differences (jobs x n_tasks) of simulated Jobs, and each Version's expected difference.

    Cell B's success probability per Task comes from a spread like real Benchmarks': 35% of Tasks
    Beta(0.3, 3) (mostly failed), 35% Beta(3, 0.3) (mostly solved), 30% Beta(2, 2). Cell A's is B's
    shifted on the logit scale, the shift solved per Version (bisection) so that the Version's mean
    of ``p_A - p_B`` is exactly ``difference`` (a proportion; negative: B better). Each cell makes
    ``attempts`` Bernoulli Trials per Task; the Tasks are iid, hence already in random order.
    """
    if not -0.4 <= difference <= 0.4:
        raise ValueError(f"simulated differences must be within 40 points, got {100 * difference:g}")
    kind = rng.choice(3, size=(jobs, n_tasks), p=[0.35, 0.35, 0.3])
    p_b = np.clip(rng.beta(np.array([0.3, 3.0, 2.0])[kind], np.array([3.0, 0.3, 2.0])[kind]), 1e-9, 1 - 1e-9)
    p_a = p_b
    if difference != 0.0:
        logit = np.log(p_b) - np.log1p(-p_b)
        low, high = np.full((jobs, 1), -40.0), np.full((jobs, 1), 40.0)
        for _ in range(60):  # the mean difference rises with the shift
            mid = (low + high) / 2
            short = (1 / (1 + np.exp(-(logit + mid))) - p_b).mean(axis=1, keepdims=True) < difference
            low, high = np.where(short, mid, low), np.where(short, high, mid)
        p_a = 1 / (1 + np.exp(-(logit + (low + high) / 2)))
    d = (rng.binomial(attempts, p_a) - rng.binomial(attempts, p_b)) / attempts
    return d, (p_a - p_b).mean(axis=1)


# --- the construction ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Noise:
    """What the capital needs besides the data: N, the capital's alpha, and the noise slack beta_t and b_t."""

    n_tasks: int
    alpha_capital: float
    slack: np.ndarray  # beta_t = b_{t-1} / (N - t + 1), t = 1..T
    bound: np.ndarray  # b_t, t = 0..T (b_0 = 0: no Task, no noise)


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def _to_unit(d: np.ndarray) -> np.ndarray:
    return (d + 1.0) / 2.0


def _prepare(differences: np.ndarray, n_tasks: int, alpha: float, attempts: float) -> tuple[np.ndarray, _Noise]:
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim not in (1, 2):
        raise ValueError(f"differences must have shape (T,) or (jobs, T), got {d.shape}")
    _check_alpha(alpha)
    t = d.shape[-1]
    if n_tasks < 1 or t > n_tasks:
        raise ValueError(f"need 1 <= n_tasks and at most n_tasks differences, got {t} of {n_tasks}")
    if not attempts >= 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    if not np.all((d >= -1.0) & (d <= 1.0)):
        raise ValueError("differences must be finite and within [-1, 1]")
    noisy = math.isfinite(attempts)
    alpha_noise = NOISE_ALPHA_SHARE * alpha if noisy else 0.0
    bound = np.zeros(t + 1)
    if noisy:
        s2 = 1.0 / (8.0 * attempts)
        rho = RHO_SHARE * n_tasks * s2
        v = np.arange(1, t + 1) * s2 + rho
        bound[1:] = np.sqrt(v * np.log(v / (rho * alpha_noise**2)))
    slack = bound[:-1] / (n_tasks - np.arange(t))
    return _to_unit(np.atleast_2d(d)), _Noise(n_tasks, alpha - alpha_noise, slack, bound)


def plugin_bets(y: np.ndarray, alpha: float) -> np.ndarray:
    """The predictable plug-in bets ``lam_t`` (2024 paper; confseq's ``lambda_predmix_eb``), last axis = time.

    ``lam_t = sqrt(2 log(2/alpha) / (sigma2_{t-1} t log(1 + t)))`` with the regularized running mean
    ``mu_t = min(1, (1/2 + sum_{i<=t} y_i)/(t + 1))`` and variance
    ``sigma2_t = (1/4 + sum_{i<=t} (y_i - mu_i)^2)/(t + 1)``, sigma2_0 = 1/4: from past values only.
    """
    t = np.arange(1, y.shape[-1] + 1)
    mean = np.minimum((0.5 + np.cumsum(y, axis=-1)) / (t + 1), 1.0)
    var = (0.25 + np.cumsum((y - mean) ** 2, axis=-1)) / (t + 1)
    before = np.concatenate([np.full(y.shape[:-1] + (1,), 0.25), var[..., :-1]], axis=-1)
    return np.sqrt(2.0 * np.log(2.0 / alpha) / (before * t * np.log1p(t)))


def _log_capitals(y: np.ndarray, noise: _Noise, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log K+ and log K- (the module docstring) of hypotheses ``m`` on [0, 1] after each Task.

    ``y`` is (jobs, T); ``m`` broadcasts against (jobs, Q, 1) (Q hypotheses per Job). Returns two
    (jobs, Q, T) arrays; +inf once a hypothesis is impossible on the noise event.
    """
    n, t = noise.n_tasks, y.shape[-1]
    remaining = n - np.arange(t)
    before = np.concatenate([np.zeros((y.shape[0], 1)), np.cumsum(y, axis=-1)[:, :-1]], axis=-1)
    centre = (n * m - before[:, None, :]) / remaining
    up, down = centre + noise.slack, centre - noise.slack
    high, low = np.minimum(up, 1.0), np.maximum(down, 0.0)
    lam = plugin_bets(y, noise.alpha_capital)[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        bet_up = np.where(high > 0, np.minimum(lam, TRUNCATION / high), lam)
        bet_down = np.where(low < 1, np.minimum(lam, TRUNCATION / (1.0 - low)), lam)
        plus = np.where(up < 0, np.inf, np.log1p(bet_up * (y[:, None, :] - high)))
        minus = np.where(down > 1, np.inf, np.log1p(-bet_down * (y[:, None, :] - low)))
    return np.cumsum(plus, axis=-1), np.cumsum(minus, axis=-1)


def _rejected_by(y: np.ndarray, noise: _Noise, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whether each hypothesis is rejected from below / from above by each time (jobs, Q, T), cumulative."""
    threshold = math.log(2.0 / noise.alpha_capital)
    plus, minus = _log_capitals(y, noise, m)
    seen = np.cumsum(y, axis=-1)[:, None, :]
    n, bound = noise.n_tasks, noise.bound[1:]
    below = (plus >= threshold) | (m < (seen - bound) / n)
    above = (minus >= threshold) | (m > (seen + bound + n - np.arange(1, y.shape[-1] + 1)) / n)
    return np.logical_or.accumulate(below, axis=-1), np.logical_or.accumulate(above, axis=-1)


def _interval_at(y: np.ndarray, noise: _Noise, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) on the D scale at each of ``times`` (Tasks seen, 0..T), (jobs, len(times)), by bisection.

    At each time the hypotheses rejected from below are [0, lower] on [0, 1] (K+ never rises in m) and
    m = 1 never is, so halving keeps ``below_low`` rejected (or 0) and ``below_high`` not; the upper end
    alike. Both ends halve together: one capital evaluation per halving.
    """
    jobs, q = y.shape[0], times.size
    if y.shape[-1] == 0:
        return np.full((jobs, q), -1.0), np.ones((jobs, q))
    seen = np.tile(times > 0, 2)
    pick = np.broadcast_to(np.tile(np.maximum(times - 1, 0), 2), (jobs, 2 * q))[..., None]
    below_low, below_high = np.zeros((jobs, q)), np.ones((jobs, q))
    above_low, above_high = np.zeros((jobs, q)), np.ones((jobs, q))
    for _ in range(BISECTIONS):
        mid = np.concatenate([below_low + below_high, above_low + above_high], axis=1) / 2
        below, above = _rejected_by(y, noise, mid[..., None])
        hit_below = np.take_along_axis(below, pick, axis=-1)[:, :q, 0] & seen[:q]
        hit_above = np.take_along_axis(above, pick, axis=-1)[:, q:, 0] & seen[q:]
        below_low, below_high = np.where(hit_below, mid[:, :q], below_low), np.where(hit_below, below_high, mid[:, :q])
        above_low, above_high = np.where(hit_above, above_low, mid[:, q:]), np.where(hit_above, mid[:, q:], above_high)
    return 2.0 * below_low - 1.0, 2.0 * above_high - 1.0


def _verdict_codes(a_better: np.ndarray, b_better: np.ndarray, too_close: np.ndarray) -> np.ndarray:
    """Codes into VERDICTS from the three tests, the module's rule table row by row."""
    codes = np.where(too_close, 3, 0)
    codes = np.where(b_better, 2, codes)
    codes = np.where(a_better, 1, codes)
    return np.where(a_better & b_better, 0, codes)
