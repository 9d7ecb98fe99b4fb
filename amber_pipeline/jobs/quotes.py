"""Quotes: the estimated cost of a Job, its reservation from the Wallet, and what an unfinished Job still needs.

A cell's estimate is the sum over its Tasks of Trials per Task x the expected
cost of one Trial of that Task. A Trial's cost has two parts, each priced
from what is known of its owner (`history.py`):

- the **Task's part**: its Environment (start, copies, stop) and its Verifier,
  from the mean of every scored Trial of the Task the Workspace may learn from
  (any Agent, any cell, validation included; every Workspace's, for a Task of
  a public Benchmark Version): "Task history". A Task nothing has run yet is
  priced from its own declared limits: its Verifier timeout, plus a start-up
  allowance (`ENVIRONMENT_ALLOWANCE_SEC`): "declared limits". A Task whose
  image is not built yet also pays for one build: the mean of its earlier
  builds, else its build timeout (once per Job: `estimate_cells` prices it
  in the first cell, since the Job's cells share the image);
- the **Agent's part** (its time in the sandbox, and the tokens the model
  proxy metered), from this Workspace's scored Trials of the cell's Agent
  Version and Model Configuration: on this Task ("cell history on the Task"),
  else their mean over other Tasks, bounded by this Task's agent timeout
  ("cell history"), else the Agent's own prior (`PRIORS`, `PAIR_PRIORS`:
  "prior"), which for the oracle, running the Task's own solution, is the
  Task's agent timeout ("declared limits"). No Agent is ever priced from
  another Agent's prior.

History counts what Trials used (metered tokens, seconds), priced at today's
prices, with a headroom of 40% (`HEADROOM`); declared limits are already
upper bounds and carry none. When Docker cannot be asked whether an image is
built, it counts as not built, so a Quote never fails for want of Docker.
Each cell says which source it used for each part, for how many Tasks.

Nothing a Quote needs is derived again from the Tasks' files: their limits and
hashes come from the Benchmark Version's summary (`benchmarks/summaries.py`),
their image tags from a summary of their own (`image_tags`), and history from
the catalog's ``trial_usage``, read once for all the cells (`known_of`). Only
Docker is asked each time, since images come and go outside Amber: by name,
one request per image, or one list of them all for a large Benchmark.

The Quote is the Job's spending ceiling, but one pool (`wallet.job_remaining`):
a cell that runs over its estimate may use what the others did not need, so
a Job stops only when its whole reservation is spent, and what is not spent
is refunded. A user may reserve more than the estimate, a ceiling of their
own (at least the estimate, at most what the Wallet has available); the
extra is spread over the cells in proportion to their estimates. A Job that
stopped at its ceiling or was cancelled goes on with a Quote for its missing
Trials (`continuation`), reserved into the same pool.

This module only estimates and reserves; the Job's lifecycle (`lifecycle.py`)
decides when a Quote is made, started, expired or released.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, Decimal
from pathlib import Path
from typing import Any

from amber_pipeline.agents.specs import agent_spec
from amber_pipeline.benchmarks import summaries, versions
from amber_pipeline.benchmarks.versions import BenchmarkVersion
from amber_pipeline.cells import NO_MODEL, Cell, model_name
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.jobs import history
from amber_pipeline.jobs.records import JobCell
from amber_pipeline.models.configurations import model_configuration
from amber_pipeline.models.wire import Usage
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import MICRO, PRICES, Prices, show, usd
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Connection, Warehouse

LIFETIME = timedelta(hours=1)
# The same Trials run again spend more or less: on a shared machine the demo's sandbox time changed by up to 36%
# from one run to the next (bench/quote_accuracy.py), and a real model's tokens per Trial vary at least as much. With
# 1.4 (about the square root of 2) a Quote holds for a repeat that spends up to 1.4 times its history, sets aside
# at most twice what one spending 0.7 times it needs, and a repeat of the same spend sits at 0.71 of its Quote, the
# geometric middle of that range.
HEADROOM = 1.4
DOCKER_ASK_TIMEOUT_SEC = 5
# Harbor's defaults where a Task declares no limit: an agent timeout of None means unlimited, taken here as
# Harbor's usual 600 s; its Verifier timeout defaults to 600 s.
DEFAULT_AGENT_SEC = 600.0
DEFAULT_VERIFIER_SEC = 600.0
# What a sandbox's start, copies and stop take besides its image, Agent and Verifier, for a Task nothing has run
# yet: 1-2 s on the demo Tasks and on the third-party ones (tests/fixtures/third_party), and no Task declares it,
# so this allows several times that.
ENVIRONMENT_ALLOWANCE_SEC = 10.0
# Validation runs Tasks nothing has run yet, so every Trial is priced at its Task's declared limits, and stopped
# at 1.5 times them, image build included; the unspent rest of the reservation is refunded as always.
VALIDATION_STOP = 1.5

# The sources of a part of an estimate, as a Quote names them.
TASK_HISTORY = "Task history"
CELL_TASK_HISTORY = "cell history on the Task"
CELL_HISTORY = "cell history"
PRIOR = "prior"
DECLARED_LIMITS = "declared limits"


@dataclass(frozen=True)
class Prior:
    """What an Agent itself uses in one Trial before this Workspace has run it with the Model Configuration: the
    tokens it sends and receives, and its own time in the sandbox (setup and run; the Task's Environment and
    Verifier are the Task's part), on the Tasks the numbers come from."""

    input_tokens: int  # all input, cached included
    output_tokens: int
    agent_sec: float | None  # None: as long as the Task allows (its agent timeout)
    cached_input_tokens: int = 0
    reference_agent_sec: float | None = None  # the agent timeout of those Tasks; None: the same on every Task


# Terminus-2 with a real model, per Trial on Terminal-Bench 2.0 Tasks (agent timeout typically 900 s): published
# Terminus-2 runs (the terminal-bench@2.0 leaderboard submissions, whose Harbor result.json files report
# agent_result token counts) use on the order of 100k-500k input tokens per Trial, most of them prompt-cache reads
# because Terminus-2 sends its whole conversation again every turn, and some thousands of output tokens, over most
# of the agent timeout. We take round numbers inside that order of magnitude, not a fitted mean: 250k input with
# 80% cached, 8k output, 600 s of the Agent's time. On a Task with a shorter agent timeout the Agent has less time
# to spend them, so they scale down with it (never up: Terminus-2 summarizes its context on long Tasks).
# oracle: runs the Task's own solution, which takes what the Task makes it take: its agent timeout until a Trial
# of it says more. nop: does nothing (Harbor's setup and run of it take milliseconds).
# direct: one call with a static Task's Instruction and a short answer.
# The installed Agents (Claude Code, Codex CLI, pi, mini-swe-agent) send a fixed context with every call (system
# prompt and tool schemas: INSTALLED_CONTEXT_TOKENS, measured against the provider double), which dominates short
# Tasks, so their priors are not scaled down with the agent timeout: 30 calls of that context plus a growing
# conversation, most of it cached, per Trial.
PRIORS = {"terminus-2": Prior(250_000, 8_000, 600.0, cached_input_tokens=200_000, reference_agent_sec=900.0),
          "oracle": Prior(0, 0, None), "nop": Prior(0, 0, 0.0), "direct": Prior(400, 300, 0.0),
          "claude-code": Prior(1_000_000, 15_000, 600.0, cached_input_tokens=900_000),
          "codex": Prior(600_000, 15_000, 600.0, cached_input_tokens=540_000),
          "pi": Prior(300_000, 10_000, 600.0, cached_input_tokens=250_000),
          "mini-swe-agent": Prior(300_000, 10_000, 600.0, cached_input_tokens=250_000)}
# Agent x Model Configuration pairs whose use was measured, which say more than the Agent's prior: the replay
# configurations' scripts on the demo Tasks (bench/quote_accuracy.py, 16 Trials each, metered by the proxy: mean
# input with cached, output, and the Agent's seconds: the Trial's less the 1.5 s of its Environment and Verifier).
# The installed Agents with the replays: metered by the proxy on count-log-errors (tests/test_installed_agents.py,
# three calls, warm images: Claude Code 30k input, Codex CLI 15.5k, pi 2.3k, mini-swe-agent 2.8k; 2-20 s in the
# sandbox), taken up to the four calls of the longer demo scripts.
_INSTALLED_REPLAY = {"claude-code": Prior(45_000, 100, 3.5, cached_input_tokens=25_000),
                     "codex": Prior(22_000, 100, 16.5, cached_input_tokens=14_000),
                     "pi": Prior(4_000, 100, 2.5, cached_input_tokens=2_500),
                     "mini-swe-agent": Prior(4_000, 100, 20.5, cached_input_tokens=2_500)}
PAIR_PRIORS = {("terminus-2", "replay-strong"): Prior(4_500, 240, 3.2, cached_input_tokens=3_350),
               ("terminus-2", "replay-weak"): Prior(2_900, 130, 2.3, cached_input_tokens=1_950)} | {
    (agent, replay): prior for agent, prior in _INSTALLED_REPLAY.items() for replay in ("replay-strong", "replay-weak")}


AT_LIMITS = Prior(0, 0, None)  # what validation prices its Trials from: nothing but the Task's own limits


def prior_of(cell: Cell) -> tuple[Prior, str]:
    """The prior a cell never run is quoted on, and how to name it: its pair's measured one, else its Agent's."""
    model = model_name(cell.model_configuration)
    if (cell.agent, model) in PAIR_PRIORS:
        return PAIR_PRIORS[(cell.agent, model)], f"measured prior for {cell.agent} with {model}"
    if cell.agent not in PRIORS:
        raise AmberError(f"The {cell.agent} Agent has no prior to quote it from: add one to "
                         "amber_pipeline/jobs/quotes.py.")
    return PRIORS[cell.agent], f"prior for {cell.agent}"


@dataclass(frozen=True)
class TaskFacts:
    """What a Quote knows of a Task before running it: its time limits, whether its image is built, and its
    content hash (by which its history is found)."""

    name: str
    agent_timeout_sec: float | None = None  # None: no limit known
    verifier_timeout_sec: float | None = None
    build_timeout_sec: float = 0.0
    image_built: bool = True
    static: bool = False  # no Environment: no sandbox, no image
    task_hash: str | None = None

    @property
    def agent_limit_sec(self) -> float:
        return self.agent_timeout_sec if self.agent_timeout_sec is not None else DEFAULT_AGENT_SEC

    @property
    def verifier_limit_sec(self) -> float:
        return self.verifier_timeout_sec if self.verifier_timeout_sec is not None else DEFAULT_VERIFIER_SEC


@dataclass(frozen=True)
class TaskEstimate:
    task: str
    per_trial: Decimal  # with headroom where it comes from history or a prior
    build: Decimal  # once (per Job: the first cell of a Job holds it); 0 when the image is built
    task_basis: str | None  # where the Task's part came from (None: a static Task has none)
    agent_basis: str  # where the Agent's part came from

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
    # Per part ("task": Environment, image and Verifier; "agent": the Agent's time and tokens), how many Tasks
    # each source priced. None: Quotes made before the parts had sources of their own.
    sources: dict[str, dict[str, int]] | None = None

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
    continuation: bool = False  # reserved by `amber job continue` into the pool of a Job that has a Quote already

    @property
    def estimate(self) -> Decimal:
        """The estimate; the amount is more when the user reserved a ceiling of their own."""
        return sum((c.estimated for c in self.cells), Decimal(0))


# ---- what is known of the Tasks ----------------------------------------------------------------------------

def task_facts(version: BenchmarkVersion, paths: AmberPaths | None = None) -> list[TaskFacts]:
    """The Benchmark Version's Tasks as a Quote sees them: their time limits, whether their images are built (the
    Docker engine is asked, every time), and their content hashes. Given ``paths``, the image tags come from the
    Version's summary (`image_tags`) rather than from hashing every Environment again."""
    tags = image_tags(version, paths) if any(t.static is None for t in version.tasks) else {}
    built = _local_images(set(tags.values())) if tags else None
    facts = []
    for task in version.tasks:
        if task.static is not None:
            facts.append(TaskFacts(task.name, task.agent_timeout_sec, static=True,
                                   task_hash=version.task_hash(task)))
            continue
        facts.append(TaskFacts(task.name, task.agent_timeout_sec, task.verifier_timeout_sec, task.build_timeout_sec,
                               image_built=built is not None and tags[task.folder] in built,
                               task_hash=version.task_hash(task)))
    return facts


def image_tags(version: BenchmarkVersion, paths: AmberPaths | None = None) -> dict[str, str]:
    """Each sandboxed Task's image tag (`task_image.image_tag`: its Environment's content hash), by its folder: from
    the Version's summary when ``paths`` has one (`remember` keeps it), else derived."""
    key = f"{version.id}-{_tag_rules()}"
    if key in _derived_tags:
        return _derived_tags[key]
    found = summaries.kept(summaries.root_of(paths.benchmarks), "image-tags", key) if paths is not None else None
    if isinstance(found, dict) and all(isinstance(found.get(t.folder), str) for t in version.tasks if t.static is None):
        return found
    from amber_pipeline.sandbox.task_image import image_tag  # Docker's SDK, Harbor's environments: on a miss only

    _derived_tags[key] = {task.folder: image_tag(version.task_path(task) / "environment", task.docker_image)
                          for task in version.tasks if task.static is None}
    return _derived_tags[key]


# A Version's files never change: tags derived in this process, kept at `remember`.
_derived_tags: dict[str, dict[str, str]] = {}


def remember(version: BenchmarkVersion, paths: AmberPaths) -> None:
    """Keep what a Quote of the stored Version derived (its reading, `versions.remember`, and its image tags), once
    the Quote is made: the next Quote of it reads none of its Tasks. A Quote refused writes nothing."""
    versions.remember(version, paths.benchmarks)
    if not any(t.static is None for t in version.tasks):
        return
    key = f"{version.id}-{_tag_rules()}"
    kept = summaries.root_of(paths.benchmarks)
    if summaries.kept(kept, "image-tags", key) is None:
        summaries.keep(kept, "image-tags", key, image_tags(version, paths))


@functools.cache
def _tag_rules() -> str:
    return summaries.rules([Path(__file__).resolve().parent.parent / "sandbox" / "task_image.py"], ["harbor"])[:32]


def _local_images(tags: set[str]) -> set[str] | None:
    """Which of ``tags`` the Docker engine holds (`held_images.py`), or None when it cannot be asked."""
    from amber_pipeline.sandbox.held_images import held

    return held(tags, DOCKER_ASK_TIMEOUT_SEC)


# ---- estimates -----------------------------------------------------------------------------------------------

def limit_seconds(facts: TaskFacts) -> float:
    """The sandbox time of one Trial of the Task at its declared limits: its agent and Verifier timeouts, and the
    Environment's start-up allowance."""
    return ENVIRONMENT_ALLOWANCE_SEC + facts.agent_limit_sec + facts.verifier_limit_sec


def validation_stop_seconds(facts: TaskFacts) -> float:
    """When a validation Trial of the Task is stopped: 1.5 times its declared limits, its image build included."""
    return VALIDATION_STOP * (limit_seconds(facts) + (0.0 if facts.image_built else facts.build_timeout_sec))


@dataclass(frozen=True)
class _Part:
    """One part of one Trial's estimate: sandbox seconds and tokens, with headroom where it is an estimate."""

    seconds: float
    basis: str
    usage: Usage = Usage()


def _scaled(usage: Usage, by: float) -> Usage:
    return Usage(round(usage.input_tokens * by), round(usage.cached_input_tokens * by),
                 round(usage.output_tokens * by))


def _task_part(facts: TaskFacts, known: history.TaskTimes | None) -> tuple[_Part | None, float]:
    """The Task's part of one Trial (Environment and Verifier), and its image build (once), from its
    history, else its declared limits; a static Task has none."""
    if facts.static:
        return None, 0.0
    build = 0.0
    if not facts.image_built:
        build = known.build_sec * HEADROOM if known and known.builds else facts.build_timeout_sec
    if known is None:
        return _Part(ENVIRONMENT_ALLOWANCE_SEC + facts.verifier_limit_sec, DECLARED_LIMITS), build
    return _Part((known.environment_sec + known.verifier_sec) * HEADROOM, TASK_HISTORY), build


def _agent_part(facts: TaskFacts, on_task: history.AgentUse | None, of_cell: history.AgentUse,
                prior: Prior) -> _Part:
    """The Agent's part of one Trial (its time and tokens): from the cell's history on the Task (``on_task``),
    else on every Task (``of_cell``: bounded by this one's agent timeout), else its prior, scaled down to the
    Task's agent timeout."""
    if on_task is not None:
        usage, seconds = on_task.mean()
        return _Part(seconds * HEADROOM, CELL_TASK_HISTORY, _scaled(usage, HEADROOM))
    if of_cell.trials:
        usage, seconds = of_cell.mean()
        return _Part(min(seconds * HEADROOM, facts.agent_limit_sec), CELL_HISTORY, _scaled(usage, HEADROOM))
    if prior.agent_sec is None:
        return _Part(facts.agent_limit_sec, DECLARED_LIMITS, _scaled(Usage(prior.input_tokens,
                     prior.cached_input_tokens, prior.output_tokens), HEADROOM))
    scale = 1.0
    if prior.reference_agent_sec and facts.agent_timeout_sec:
        scale = min(1.0, facts.agent_timeout_sec / prior.reference_agent_sec)
    usage = Usage(prior.input_tokens, prior.cached_input_tokens, prior.output_tokens)
    return _Part(min(prior.agent_sec * scale * HEADROOM, facts.agent_limit_sec), PRIOR,
                 _scaled(usage, scale * HEADROOM))


@dataclass(frozen=True)
class Known:
    """What history says to a Quote's cells (`history.py`, kept in the catalog as Trials are charged): each Task's
    times by its hash, and per cell key what its Agent used on each Task."""

    times: dict[str, history.TaskTimes]
    used: dict[str, dict[str | None, history.AgentUse]]


def known_of(wh: Warehouse, workspace: str, cells: Sequence[Cell], sandboxed: Sequence[str]) -> Known:
    """What history says to the cells about the Tasks (``sandboxed``: the hashes of those with an Environment,
    whose times it knows), from one read of the catalog."""
    with wh.read() as con:
        times = history.task_times(con, workspace, list(sandboxed))
        return Known(times, {cell.key: history.agent_use(con, workspace, cell.key) for cell in cells})


def sandboxed_hashes(version: BenchmarkVersion) -> list[str]:
    """The hashes of the Version's Tasks that have an Environment: those whose times history keeps."""
    return [version.task_hash(t) for t in version.tasks if t.static is None]


def estimate_tasks(wh: Warehouse, workspace: str, cell: Cell, tasks: Sequence[TaskFacts], prices: Prices = PRICES,
                   *, at_limits: bool = False, known: Known | None = None) -> list[TaskEstimate]:
    """Each Task's expected cost per Trial in the cell and its image build where the image is not built yet:
    from history where there is some (``known``, else read now), else priors and declared limits (see the
    module's docstring); ``at_limits``: every Trial at its Task's declared limits, whatever is known
    (validation)."""
    sandboxed = not agent_spec(cell.agent).static
    mc = (model_configuration(cell.model_configuration, wh.paths, workspace)
          if cell.model_configuration != NO_MODEL else None)
    times: dict[str, history.TaskTimes] = {}
    used: dict[str | None, history.AgentUse] = {}
    prior = AT_LIMITS
    if not at_limits:
        prior, _ = prior_of(cell)
        if known is None or cell.key not in known.used:
            known = known_of(wh, workspace, [cell], [f.task_hash for f in tasks if f.task_hash and not f.static])
        times, used = known.times, known.used[cell.key]
    of_cell = sum(used.values(), history.AgentUse())
    # Tasks with the same limits and the same history have the same estimate: priced once (1,000 Tasks of one
    # kind are a few distinct estimates).
    priced: dict[tuple[Any, ...], tuple[Decimal, Decimal, str | None, str]] = {}
    estimates = []
    for facts in tasks:
        task_times = times.get(facts.task_hash) if facts.task_hash else None
        on_task = used.get(facts.task_hash) if facts.task_hash else None
        key = (facts.agent_timeout_sec, facts.verifier_timeout_sec, facts.build_timeout_sec, facts.image_built,
               facts.static, task_times, on_task)
        if key not in priced:
            task, build = _task_part(facts, task_times)
            agent = _agent_part(facts, on_task, of_cell, prior)
            seconds = task.seconds + agent.seconds if sandboxed and task is not None else 0.0
            priced[key] = (usd(prices.trial_cost(mc, agent.usage, seconds)), usd(prices.sandbox_cost(build)),
                           task.basis if task else None, agent.basis)
        estimates.append(TaskEstimate(facts.name, *priced[key]))
    return estimates


def _sources(estimates: Sequence[TaskEstimate]) -> dict[str, dict[str, int]]:
    """Per part, how many Tasks each source priced."""
    found = {"task": dict(Counter(e.task_basis for e in estimates if e.task_basis is not None)),
             "agent": dict(Counter(e.agent_basis for e in estimates))}
    return {part: counts for part, counts in found.items() if counts}


def _basis(cell: Cell, estimates: Sequence[TaskEstimate]) -> str:
    """Which sources the cell used for each part, in one phrase."""
    sources = _sources(estimates)

    def listed(counts: dict[str, int]) -> str:
        named = {PRIOR: prior_of(cell)[1]}
        return ", ".join(f"{named.get(source, source)} ({n} Task{'s' if n != 1 else ''})"
                         for source, n in counts.items())

    parts = []
    if "task" in sources:
        parts.append(f"Environment and Verifier: {listed(sources['task'])}")
    parts.append(f"Agent{' and tokens' if cell.model_configuration != NO_MODEL else ''}: "
                 f"{listed(sources['agent'])}")
    builds = sum(e.build > 0 for e in estimates)
    if builds:
        parts.append(f"{builds} image build{'s' if builds != 1 else ''}")
    return "; ".join(parts)


def estimate_cell(wh: Warehouse, workspace: str, cell: Cell, tasks: Sequence[TaskFacts], trials_per_task: int,
                  prices: Prices = PRICES, *, at_limits: bool = False, known: Known | None = None) -> CellQuote:
    """The cell's estimate over its Tasks (`task_facts`); ``at_limits``: each Trial at its Task's declared
    limits (validation)."""
    estimates = estimate_tasks(wh, workspace, cell, tasks, prices, at_limits=at_limits, known=known)
    return cell_quote(cell, estimates, {e.task: trials_per_task for e in estimates}, trials_per_task)


def estimate_cells(wh: Warehouse, workspace: str, cells: Sequence[Cell], tasks: Sequence[TaskFacts],
                   trials_per_task: int, prices: Prices = PRICES, *, at_limits: bool = False,
                   known: Known | None = None) -> list[CellQuote]:
    """A Job's cells' estimates over its Tasks, from one read of history (``known``, when the caller read it). The
    cells share the Tasks' images, so a build is priced once, in the first cell's estimate."""
    if known is None and not at_limits:
        known = known_of(wh, workspace, cells, [f.task_hash for f in tasks if f.task_hash and not f.static])
    built = [replace(f, image_built=True) for f in tasks]
    return [estimate_cell(wh, workspace, cell, tasks if i == 0 else built, trials_per_task, prices,
                          at_limits=at_limits, known=known) for i, cell in enumerate(cells)]


def cell_quote(cell: Cell, estimates: Sequence[TaskEstimate], trials: dict[str, int],
               trials_per_task: int) -> CellQuote:
    """A cell's part of a Quote: ``trials`` Trials of each estimated Task."""
    total = sum((e.cost(trials[e.task]) for e in estimates), Decimal(0))
    n_trials = sum(trials.values())
    per_trial = usd(total / n_trials) if n_trials else Decimal(0)
    return CellQuote(cell.key, cell.label, len(estimates), trials_per_task, str(per_trial), _basis(cell, estimates),
                     str(total), str(total), _sources(estimates))


# ---- a ceiling of one's own, and the reservation -------------------------------------------------------------

def with_ceiling(cells: list[CellQuote], ceiling: float | Decimal | None) -> list[CellQuote]:
    """The cells with a ceiling of the user's own spread over them in proportion to their estimates (each
    share rounded down to the micro-dollar, the rest to the largest cell), or a refusal below the estimate.
    Given its own result again it changes nothing, so cells priced with the ceiling (`lifecycle.price`) reserve
    as priced."""
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
    return [replace(c, total=str(c.estimated + share), estimate=str(c.estimated))
            for c, share in zip(cells, shares, strict=True)]


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
    return _record(con, Quote(new_quote_id(), workspace, job_id, benchmark_label, amount, now, now + LIFETIME,
                              cells))


def new_quote_id() -> str:
    return f"quote-{uuid.uuid4().hex[:10]}"


def continuation(con: Connection, workspace: str, job_id: str, benchmark_label: str, cells: list[CellQuote],
                 amount: Decimal, now: datetime, quote_id: str | None = None) -> Quote:
    """Record a Quote that continues a Job (`amber job continue`: its ``cells`` price the missing Trials) and
    reserve ``amount`` into the Job's pool inside the caller's catalog transaction, or refuse it. It is spent
    at once, so it never expires."""
    return _record(con, Quote(quote_id or new_quote_id(), workspace, job_id, benchmark_label, amount, now, now,
                              cells, continuation=True))


def _record(con: Connection, quote: Quote) -> Quote:
    con.execute("insert into quotes (id, workspace, job_id, amount, created_at, expires_at, detail, continuation) "
                "values (?, ?, ?, ?, ?, ?, ?, ?)",
                [quote.id, quote.workspace, quote.job_id, quote.amount, quote.created_at, quote.expires_at,
                 json.dumps([asdict(c) for c in quote.cells]), quote.continuation])
    wallet.reserve(con, quote.workspace, quote.id, quote.job_id, quote.amount, quote.created_at)
    return quote


def get(wh: Warehouse, workspace: str, quote_or_job_id: str) -> Quote:
    """A Quote of the Workspace, by its id, or its Job's (the one that started the Job)."""
    with wh.read() as con:
        row = con.execute("""select q.id, q.workspace, q.job_id, b.label, q.amount, q.created_at, q.expires_at,
                                    q.detail, coalesce(q.continuation, false)
                             from quotes q join jobs j on j.id = q.job_id
                             join benchmark_versions b on b.id = j.benchmark_version_id and b.owner = j.benchmark_owner
                             where q.workspace = ? and (q.id = ? or (q.job_id = ? and q.id = j.quote_id))""",
                          [workspace, quote_or_job_id, quote_or_job_id]).fetchone()
    if row is None:
        raise NotFound(f"No Quote {quote_or_job_id} in Workspace {workspace}: "
                       "make one with `amber job quote`.")
    quote_id, ws, job_id, label, amount, created_at, expires_at, detail, continues = row
    return Quote(quote_id, ws, job_id, label, amount, created_at, expires_at,
                 [CellQuote(**c) for c in json.loads(detail)], continues)


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
    quote: CellQuote  # the cell's part of a Quote for them: what `amber job continue` reserves

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
                                 [MissingTask(e.task, left[e.task], e.cost(left[e.task])) for e in estimates],
                                 cell_quote(cell, estimates, left, trials_per_task)))
    return found
