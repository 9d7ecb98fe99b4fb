"""Quotes: the estimated cost of a Job, its reservation from the Wallet, and what an unfinished Job still needs.

A cell's estimate is the sum over its Tasks of Trials per Task x the expected
cost of one Trial of that Task, taken from the first of:

1. this Workspace's earlier scored Trials of this Task in this cell (their mean);
2. its earlier scored Trials of this cell on other Tasks (their mean);
3. the prior of the Agent with this Model Configuration when that pair's use
   was measured (`PAIR_PRIORS`), else the Agent's (`PRIORS`), fitted to what the Task says of itself: its
   tokens and sandbox time scaled down to the Task's agent timeout when the
   prior was taken on Tasks with longer ones, and its sandbox time bounded by
   the Task's agent and Verifier timeouts.

History counts what the Trials used (metered tokens, sandbox seconds), priced
at today's prices. A Task whose sandbox image is not built yet also pays for
one build (a prior bounded by its build timeout) once per cell; when Docker
cannot be asked, the image counts as not built, so a Quote never fails for
want of Docker. A headroom of 40% is added throughout (`HEADROOM`), because
the Quote is also the Job's spending ceiling and a ceiling at the mean would
stop half of all Jobs early. Each cell says which estimates it used.

A user may reserve more than the estimate, a ceiling of their own (at least
the estimate, at most what the Wallet has available); the extra is spread
over the cells in proportion to their estimates, so the cells' totals, which
the model proxy uses as each cell's budget, still sum to the Quote.

This module only estimates and reserves; the Job's lifecycle (`lifecycle.py`)
decides when a Quote is made, started, expired or released.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any

import requests
from docker.errors import DockerException

from amber_pipeline.agents.catalog import agent_spec
from amber_pipeline.benchmarks.versions import BenchmarkVersion
from amber_pipeline.cells import NO_MODEL, Cell, model_name
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.jobs.records import JobCell
from amber_pipeline.models.configurations import ModelConfiguration, model_configuration
from amber_pipeline.models.wire import Usage
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import MICRO, PRICES, Prices, show, usd
from amber_pipeline.sandbox import docker_engine
from amber_pipeline.warehouse.catalog import Connection, Warehouse

LIFETIME = timedelta(hours=1)
# The same Trials run again spend more or less: on a shared machine the demo's sandbox time changed by up to 36%
# from one run to the next (bench/quote_accuracy.py), and a real model's tokens per Trial vary at least as much. With
# 1.4 (about the square root of 2) a Quote holds for a repeat that spends up to 1.4 times its history, sets aside
# at most twice what one spending 0.7 times it needs, and a repeat of the same spend sits at 0.71 of its Quote, the
# geometric middle of that range.
HEADROOM = Decimal("1.4")
# One image build, when the Task's image is not built yet, bounded by the Task's build timeout (Harbor's default is
# 600 s): a Task image that installs a few packages on a cached base builds in about a minute or two.
BUILD_PRIOR_SEC = 120.0
DOCKER_ASK_TIMEOUT_SEC = 5
# Validation runs Tasks nothing has run yet, so its Quote expects each Trial to use its Task's own time limits:
# the agent timeout (the oracle runs the solution under it; Harbor's None means unlimited, taken here as Harbor's
# usual 600 s) and the Verifier timeout (Harbor's default 600 s). The Trial is stopped at 1.5 times that, plus an
# image build when the image is not built yet; the unspent rest of the reservation is refunded as always.
VALIDATION_AGENT_SEC = 600.0
VALIDATION_VERIFIER_SEC = 600.0
VALIDATION_STOP = 1.5


@dataclass(frozen=True)
class Prior:
    """What one Trial of an Agent uses before this Workspace has run it, on the Tasks the numbers come from."""

    input_tokens: int  # all input, cached included
    output_tokens: int
    sandbox_sec: float
    cached_input_tokens: int = 0
    reference_agent_sec: float | None = None  # the agent timeout of those Tasks; None: the same on every Task


# Terminus-2 with a real model, per Trial on Terminal-Bench 2.0 Tasks (agent timeout typically 900 s): published
# Terminus-2 runs (the terminal-bench@2.0 leaderboard submissions, whose Harbor result.json files report
# agent_result token counts) use on the order of 100k-500k input tokens per Trial, most of them prompt-cache reads
# because Terminus-2 sends its whole conversation again every turn, and some thousands of output tokens, over most
# of the agent timeout. We take round numbers inside that order of magnitude, not a fitted mean: 250k input with
# 80% cached, 8k output, 600 s of sandbox. On a Task with a shorter agent timeout the Agent has less time to spend
# them, so they scale down with it (never up: Terminus-2 summarizes its context on long Tasks).
# oracle and nop: measured on the demo Tasks (examples/demo-bench, images built, two Trials at a time,
# bench/quote_accuracy.py): on a busy machine the oracle's Trials took 2.5-3.4 s on average, nop's 1.8-2.5 s; on
# a quiet one 1.7 s and 1.4 s, container start-up and Verifier included. The priors sit where the headroom covers
# both (2.3 s and 1.8 s). Tasks whose solution or Verifier runs longer are not known until they have run.
# direct: one call with a static Task's Instruction and a short answer.
# The installed Agents (Claude Code, Codex CLI, pi, mini-swe-agent) send a fixed context with every call (system
# prompt and tool schemas: INSTALLED_CONTEXT_TOKENS, measured against the provider double), which dominates short
# Tasks, so their priors are not scaled down with the agent timeout: 30 calls of that context plus a growing
# conversation, most of it cached, per Trial.
PRIORS = {"terminus-2": Prior(250_000, 8_000, 600.0, cached_input_tokens=200_000, reference_agent_sec=900.0),
          "oracle": Prior(0, 0, 2.3), "nop": Prior(0, 0, 1.8), "direct": Prior(400, 300, 0.0),
          "claude-code": Prior(1_000_000, 15_000, 600.0, cached_input_tokens=900_000),
          "codex": Prior(600_000, 15_000, 600.0, cached_input_tokens=540_000),
          "pi": Prior(300_000, 10_000, 600.0, cached_input_tokens=250_000),
          "mini-swe-agent": Prior(300_000, 10_000, 600.0, cached_input_tokens=250_000)}
UNKNOWN_PRIOR = PRIORS["terminus-2"]  # an Agent without its own prior is assumed to spend like Terminus-2
# Agent x Model Configuration pairs whose use was measured, which say more than the Agent's prior: the replay
# configurations' scripts on the demo Tasks (bench/quote_accuracy.py, 16 Trials each, metered by the proxy: mean
# input with cached, output, sandbox seconds). A pair's prior, like an Agent's, gives way to history.
# The installed Agents with the replays: metered by the proxy on count-log-errors (tests/test_installed_agents.py,
# three calls, warm images: Claude Code 30k input, Codex CLI 15.5k, pi 2.3k, mini-swe-agent 2.8k; 2-20 s in the
# sandbox), taken up to the four calls of the longer demo scripts.
_INSTALLED_REPLAY = {"claude-code": Prior(45_000, 100, 5.0, cached_input_tokens=25_000),
                     "codex": Prior(22_000, 100, 18.0, cached_input_tokens=14_000),
                     "pi": Prior(4_000, 100, 4.0, cached_input_tokens=2_500),
                     "mini-swe-agent": Prior(4_000, 100, 22.0, cached_input_tokens=2_500)}
PAIR_PRIORS = {("terminus-2", "replay-strong"): Prior(4_500, 240, 4.7, cached_input_tokens=3_350),
               ("terminus-2", "replay-weak"): Prior(2_900, 130, 3.8, cached_input_tokens=1_950)} | {
    (agent, replay): prior for agent, prior in _INSTALLED_REPLAY.items() for replay in ("replay-strong", "replay-weak")}


def prior_of(cell: Cell) -> tuple[Prior, str]:
    """The prior a cell never run is quoted on, and how to name it: its pair's measured one, else its Agent's."""
    model = model_name(cell.model_configuration)
    if (cell.agent, model) in PAIR_PRIORS:
        return PAIR_PRIORS[(cell.agent, model)], f"measured prior for {cell.agent} with {model}"
    return PRIORS.get(cell.agent, UNKNOWN_PRIOR), f"prior for {cell.agent}"


@dataclass(frozen=True)
class TaskFacts:
    """What a Quote knows of a Task before running it: its time limits and whether its image is built."""

    name: str
    agent_timeout_sec: float | None = None  # None: no limit known
    verifier_timeout_sec: float | None = None
    build_timeout_sec: float = 0.0
    image_built: bool = True
    static: bool = False  # no Environment: no sandbox, no image


@dataclass(frozen=True)
class TaskEstimate:
    task: str
    per_trial: Decimal  # with headroom
    build: Decimal  # once per cell, with headroom; 0 when the image is built
    basis: str  # "task", "cell" or "prior"

    def cost(self, trials: int) -> Decimal:
        return self.per_trial * trials + self.build


@dataclass(frozen=True)
class CellQuote:
    cell_key: str
    label: str
    n_tasks: int
    trials_per_task: int
    cost_per_trial: str  # Decimal as text, exact: the cell's estimate over its Trials
    basis: str
    total: str  # what the cell may spend: its estimate, plus its share of a ceiling of the user's own
    estimate: str | None = None  # None: Quotes made before ceilings of one's own, whose total is the estimate

    @property
    def estimated(self) -> Decimal:
        return Decimal(self.estimate if self.estimate is not None else self.total)


@dataclass(frozen=True)
class Quote:
    id: str
    workspace: str
    job_id: str
    benchmark_label: str
    amount: Decimal
    created_at: datetime
    expires_at: datetime
    cells: list[CellQuote]

    @property
    def estimate(self) -> Decimal:
        """The estimate; the amount is more when the user reserved a ceiling of their own."""
        return sum((c.estimated for c in self.cells), Decimal(0))


# ---- what is known of the Tasks ----------------------------------------------------------------------------

def task_facts(version: BenchmarkVersion) -> list[TaskFacts]:
    """The Benchmark Version's Tasks as a Quote sees them: their time limits, and whether their images are built."""
    from amber_pipeline.sandbox.environment import image_tag

    built = _local_images() if any(t.static is None for t in version.tasks) else None
    facts = []
    for task in version.tasks:
        if task.static is not None:
            facts.append(TaskFacts(task.name, task.agent_timeout_sec, static=True))
            continue
        tag = image_tag(version.task_path(task) / "environment", task.docker_image)
        facts.append(TaskFacts(task.name, task.agent_timeout_sec, task.verifier_timeout_sec, task.build_timeout_sec,
                               image_built=built is not None and tag in built))
    return facts


def _local_images() -> set[str] | None:
    """The tags of the images the Docker engine holds, or None when it cannot be asked."""
    try:
        client = docker_engine.connect(timeout=DOCKER_ASK_TIMEOUT_SEC)
        return {tag for image in client.images.list() for tag in image.tags}
    except (AmberError, DockerException, requests.RequestException, OSError):
        return None


# ---- estimates -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Used:
    """What scored Trials used in all: how many, their metered tokens and their sandbox seconds."""

    trials: int = 0
    usage: Usage = Usage()
    seconds: float = 0.0

    def __add__(self, other: Used) -> Used:
        return Used(self.trials + other.trials, self.usage + other.usage, self.seconds + other.seconds)

    def mean_cost(self, mc: ModelConfiguration | None, prices: Prices, sandboxed: bool) -> Decimal:
        """The mean cost of one of these Trials at today's prices."""
        return prices.trial_cost(mc, self.usage, self.seconds if sandboxed else 0.0) / self.trials


def _history(wh: Warehouse, workspace: str, cell_key: str) -> dict[str, Used]:
    """Task -> what the cell's scored Trials of it used, in this Workspace."""
    with wh.query(workspace, {"trials"}) as con:
        rows = con.execute("select task_name, count(*), sum(input_tokens), sum(cached_input_tokens), "
                           "sum(output_tokens), sum(duration_sec) from trials "
                           "where cell_key = ? and outcome = 'scored' group by task_name", [cell_key]).fetchall()
    return {task: Used(n, Usage(int(i), int(c), int(o)), float(sec)) for task, n, i, c, o, sec in rows}


def limit_seconds(facts: TaskFacts) -> float:
    """The sandbox time a validation Quote expects of one Trial of the Task: its own time limits."""
    agent = facts.agent_timeout_sec if facts.agent_timeout_sec is not None else VALIDATION_AGENT_SEC
    verifier = facts.verifier_timeout_sec if facts.verifier_timeout_sec is not None else VALIDATION_VERIFIER_SEC
    return agent + verifier


def validation_stop_seconds(facts: TaskFacts) -> float:
    """When a validation Trial of the Task is stopped: 1.5 times what its Quote expected, build included."""
    build = 0.0 if facts.image_built else min(BUILD_PRIOR_SEC, facts.build_timeout_sec)
    return VALIDATION_STOP * (limit_seconds(facts) + build)


def _prior_cost(prior: Prior, facts: TaskFacts, mc: ModelConfiguration | None, prices: Prices) -> Decimal:
    """One Trial of the Task on the prior: scaled down to the Task's agent timeout, sandbox time bounded by its
    timeouts, cached input at the cached price."""
    scale = 1.0
    if prior.reference_agent_sec and facts.agent_timeout_sec:
        scale = min(1.0, facts.agent_timeout_sec / prior.reference_agent_sec)
    usage = Usage(round(prior.input_tokens * scale), round(prior.cached_input_tokens * scale),
                  round(prior.output_tokens * scale))
    seconds = 0.0 if facts.static else prior.sandbox_sec * scale
    if facts.agent_timeout_sec is not None and facts.verifier_timeout_sec is not None:
        seconds = min(seconds, facts.agent_timeout_sec + facts.verifier_timeout_sec)
    return prices.trial_cost(mc, usage, seconds)


def estimate_tasks(wh: Warehouse, workspace: str, cell: Cell, tasks: Sequence[TaskFacts],
                   prices: Prices = PRICES) -> list[TaskEstimate]:
    """Each Task's expected cost per Trial in the cell (with headroom), from its own history, else the cell's,
    else the Agent's prior; plus one image build where the image is not built yet."""
    return _estimates(wh, workspace, cell, tasks, _history(wh, workspace, cell.key), prices)


def _estimates(wh: Warehouse, workspace: str, cell: Cell, tasks: Sequence[TaskFacts], history: dict[str, Used],
               prices: Prices, at_limits: bool = False) -> list[TaskEstimate]:
    of_cell = sum(history.values(), Used())
    prior, _ = prior_of(cell)
    sandboxed = not agent_spec(cell.agent).static
    mc = (model_configuration(cell.model_configuration, wh.paths, workspace)
          if cell.model_configuration != NO_MODEL else None)
    estimates = []
    for facts in tasks:
        build = (prices.sandbox_cost(min(BUILD_PRIOR_SEC, facts.build_timeout_sec))
                 if not (facts.image_built or facts.static) else Decimal(0))
        if at_limits:  # a ceiling already: no headroom on top
            estimates.append(TaskEstimate(facts.name, usd(prices.sandbox_cost(limit_seconds(facts))), usd(build),
                                          "limits"))
            continue
        if facts.name in history:
            mean, basis = history[facts.name].mean_cost(mc, prices, sandboxed and not facts.static), "task"
        elif of_cell.trials:
            mean, basis = of_cell.mean_cost(mc, prices, sandboxed and not facts.static), "cell"
        else:
            mean, basis = _prior_cost(prior, facts, mc, prices), "prior"
        estimates.append(TaskEstimate(facts.name, usd(mean * HEADROOM), usd(build * HEADROOM), basis))
    return estimates


def _describe(prior: Prior, name: str) -> str:
    uses = []
    if prior.input_tokens or prior.output_tokens:
        uses.append(f"{prior.input_tokens:,} input ({prior.cached_input_tokens:,} cached) and "
                    f"{prior.output_tokens:,} output tokens")
    if prior.sandbox_sec:
        uses.append(f"{prior.sandbox_sec:g} s of sandbox")
    scaled = (f" on a {prior.reference_agent_sec:g} s Task, scaled down to each Task's agent timeout"
              if prior.reference_agent_sec else "")
    return f"{name}: {', '.join(uses) or 'nothing'} per Trial{scaled}"


def _basis(cell: Cell, estimates: Sequence[TaskEstimate], measured: int, bounded: bool) -> str:
    """Which estimates the cell used, in one phrase."""
    count = {b: sum(e.basis == b for e in estimates) for b in ("task", "cell", "prior", "limits")}
    parts = []
    if count["limits"]:
        parts.append("each Trial at its Task's time limits (agent and Verifier timeouts): nothing ran these "
                     "Tasks yet")
    if count["task"]:
        parts.append(f"history of this cell: {count['task']} Tasks measured")
    if count["cell"]:
        parts.append(f"{count['cell']} Tasks at the cell's mean of {measured} Trials")
    if count["prior"]:
        parts.append(_describe(*prior_of(cell)) + (", bounded by the Task timeouts" if bounded else "")
                     + (f" ({count['prior']} Tasks)" if count["task"] or count["cell"] else ""))
    builds = sum(e.build > 0 for e in estimates)
    if builds:
        parts.append(f"{builds} image builds of {BUILD_PRIOR_SEC:g} s at most")
    return "; ".join(parts)


def estimate_cell(wh: Warehouse, workspace: str, cell: Cell, tasks: int | Sequence[TaskFacts], trials_per_task: int,
                  prices: Prices = PRICES, *, at_limits: bool = False) -> CellQuote:
    """The cell's estimate over its Tasks (`task_facts`), or over ``tasks`` Tasks nothing is known of;
    ``at_limits``: each Trial at its Task's time limits (validation)."""
    facts = [TaskFacts("")] * tasks if isinstance(tasks, int) else list(tasks)
    history = _history(wh, workspace, cell.key)
    estimates = _estimates(wh, workspace, cell, facts, history, prices, at_limits)
    total = sum((e.cost(trials_per_task) for e in estimates), Decimal(0))
    n_trials = len(facts) * trials_per_task
    per_trial = usd(total / n_trials) if n_trials else Decimal(0)
    measured = sum(used.trials for used in history.values())
    bounded = any(f.agent_timeout_sec is not None and f.verifier_timeout_sec is not None for f in facts)
    basis = _basis(cell, estimates, measured, bounded)
    return CellQuote(cell.key, cell.label, len(facts), trials_per_task, str(per_trial), basis, str(total), str(total))


# ---- a ceiling of one's own, and the reservation -------------------------------------------------------------

def with_ceiling(cells: list[CellQuote], ceiling: float | Decimal | None) -> list[CellQuote]:
    """The cells with a ceiling of the user's own spread over them in proportion to their estimates (each
    share rounded down to the micro-dollar, the rest to the largest cell), or a refusal below the estimate."""
    estimate = sum((c.estimated for c in cells), Decimal(0))
    if ceiling is None:
        return cells
    asked = usd(ceiling)
    if asked < estimate:
        raise AmberError(f"A ceiling of {show(asked)} is below this Job's estimate of {show(estimate)}: give "
                         f"--ceiling of at least {show(estimate)}, or leave it out to reserve the estimate.")
    extra = asked - estimate
    if not cells or extra == 0:
        return cells
    weights = [c.estimated for c in cells] if estimate > 0 else [Decimal(1)] * len(cells)
    shares = [(extra * w / sum(weights)).quantize(MICRO, rounding=ROUND_DOWN) for w in weights]
    largest = max(range(len(cells)), key=lambda i: weights[i])
    shares[largest] += extra - sum(shares)
    return [CellQuote(c.cell_key, c.label, c.n_tasks, c.trials_per_task, c.cost_per_trial, c.basis,
                      str(c.estimated + share), str(c.estimated)) for c, share in zip(cells, shares, strict=True)]


def reserve(con: Connection, workspace: str, job_id: str, benchmark_label: str,
            cells: list[CellQuote], now: datetime, ceiling: float | Decimal | None = None) -> Quote:
    """Record the Quote and reserve its amount (the estimate, or a ceiling of the user's own above it) inside
    the caller's catalog transaction, or refuse it."""
    cells = with_ceiling(cells, ceiling)
    amount = sum((Decimal(c.total) for c in cells), Decimal(0))
    if ceiling is not None:
        available = wallet.state(con, workspace).available
        if amount > available:
            raise AmberError(f"Workspace {workspace} has {show(available)} available but your ceiling asks for "
                             f"{show(amount)}: lower --ceiling to at most {show(available)} or ask Amber staff "
                             "for a Credit.")
    quote = Quote(f"quote-{uuid.uuid4().hex[:10]}", workspace, job_id, benchmark_label, amount, now,
                  now + LIFETIME, cells)
    con.execute("insert into quotes values (?, ?, ?, ?, ?, ?, ?)",
                [quote.id, workspace, job_id, amount, now, quote.expires_at, json.dumps([asdict(c) for c in cells])])
    wallet.reserve(con, workspace, quote.id, job_id, amount, now)
    return quote


def get(wh: Warehouse, workspace: str, quote_or_job_id: str) -> Quote:
    """A Quote of the Workspace, by its id or its Job's."""
    with wh.read() as con:
        row = con.execute("""select q.id, q.workspace, q.job_id, b.label, q.amount, q.created_at, q.expires_at, q.detail
                             from quotes q join jobs j on j.id = q.job_id
                             join benchmark_versions b on b.id = j.benchmark_version_id and b.owner = j.benchmark_owner
                             where q.workspace = ? and (q.id = ? or q.job_id = ?)""",
                          [workspace, quote_or_job_id, quote_or_job_id]).fetchone()
    if row is None:
        raise NotFound(f"No Quote {quote_or_job_id} in Workspace {workspace}: "
                       "make one with `amber job quote`.")
    quote_id, ws, job_id, label, amount, created_at, expires_at, detail = row
    return Quote(quote_id, ws, job_id, label, amount, created_at, expires_at,
                 [CellQuote(**c) for c in json.loads(detail)])


def due(wh: Warehouse, now: datetime) -> list[str]:
    """Quotes past their expiry whose Job never started."""
    with wh.read() as con:
        return [q for (q,) in con.execute("""select q.id from quotes q join jobs j on j.id = q.job_id
                                             where j.status = 'quoted' and q.expires_at <= ?""", [now]).fetchall()]


# ---- what a Job that stopped early still needs ---------------------------------------------------------------

@dataclass(frozen=True)
class MissingTask:
    task: str
    trials: int  # Trials of the Task still without a Reward
    cost_usd: Decimal  # what finishing them is estimated to cost, as a Quote would reserve it


@dataclass(frozen=True)
class MissingCell:
    cell_key: str
    route: str  # Agent, or Agent/Model Configuration: as the report names the cell
    tasks: list[MissingTask]

    @property
    def cost_usd(self) -> Decimal:
        return sum((t.cost_usd for t in self.tasks), Decimal(0))

    def as_json(self) -> dict[str, Any]:
        return {"route": self.route, "cell_key": self.cell_key, "cost_usd": float(self.cost_usd),
                "tasks": [{"task": t.task, "trials": t.trials, "cost_usd": float(t.cost_usd)} for t in self.tasks]}


def to_finish(wh: Warehouse, workspace: str, job_id: str, version_id: str, cells: Sequence[JobCell],
              tasks: Sequence[TaskFacts], trials_per_task: int, prices: Prices = PRICES) -> list[MissingCell]:
    """The Tasks of each cell of the Job with fewer scored Trials than asked for, and what finishing them would
    cost by the same per-Task estimate a Quote makes (the Job's own scored Trials now count as history)."""
    with wh.query(workspace, {"trials"}) as con:
        scored = {(k, t): n for k, t, n in con.execute(
            "select cell_key, task_name, count(*) from trials where job_id = ? and outcome = 'scored' group by all",
            [job_id]).fetchall()}
    found = []
    for job_cell in cells:
        spec = job_cell.cell_key.split(f"|agent={job_cell.agent}@", 1)[-1].split("|mc=", 1)[0]
        cell = Cell(version_id, job_cell.agent, spec, job_cell.model_configuration)
        if cell.key != job_cell.cell_key:
            raise AmberError(f"Job {job_id} has a cell key Amber cannot read, {job_cell.cell_key!r}: submit the Job "
                             "again.")
        short = [f for f in tasks if scored.get((cell.key, f.name), 0) < trials_per_task]
        if not short:
            continue
        estimates = estimate_tasks(wh, workspace, cell, short, prices)
        route = cell.agent if cell.model_configuration == NO_MODEL else f"{cell.agent}/{cell.model_name}"
        left = {e.task: trials_per_task - scored.get((cell.key, e.task), 0) for e in estimates}
        found.append(MissingCell(job_cell.cell_key, route,
                                 [MissingTask(e.task, left[e.task], e.cost(left[e.task])) for e in estimates]))
    return found

