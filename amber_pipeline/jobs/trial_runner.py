"""Runs the Trials of one cell of a Job through Harbor's trial engine.

Each Trial is a Harbor `Trial` with Amber's sandbox (`sandbox.AmberSandbox`)
and the cell's Agent. A Trial that fails in any way becomes a row with its
outcome, error type and message: one bad Trial never sinks the cell. An
Errored Trial is retried when `outcomes` says so (at most twice more). While
Trials run, a watcher asks `keep_going` every second; once the Job is
cancelled or at its ceiling, no new Trial starts and the in-flight ones are
cancelled, which makes Harbor stop them and remove their sandboxes.

Every model call goes through Amber's model proxy, started for the cell run:
each Trial attempt gets its own token (the Agent's "API key"), the proxy pins
the calls to the cell's Model Configuration and meters them, and the Trial is
charged what the proxy metered, not what the Agent says it used (both are
kept). Provider signals the proxy raised make the attempt Errored. A call
that would pass what is left of the Job's pool is refused, which stops the
Job at its ceiling.

Trial folders are named `<task>__<attempt>` so a cell run that crashed and
is resumed replaces the Trials it runs again instead of adding to them; the
Trials an earlier run stored scored (`CellRun.done`) are not run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from amber_pipeline.agents.connection import harbor_agent
from amber_pipeline.agents.specs import AgentSpec, agent_spec
from amber_pipeline.benchmarks.tasks import TaskSpec
from amber_pipeline.benchmarks.versions import BenchmarkVersion
from amber_pipeline.cells import Cell
from amber_pipeline.jobs import outcomes, placement
from amber_pipeline.jobs.budget import Budget, Pool
from amber_pipeline.jobs.cell_models import CellModels, TranscriptCall, cell_models
from amber_pipeline.jobs.stopping import StoppingRule
from amber_pipeline.models.configurations import model_configuration
from amber_pipeline.models.endpoint import offline_litellm
from amber_pipeline.models.wire import Usage
from amber_pipeline.money.prices import PRICES, Prices
from amber_pipeline.paths import AmberPaths
from amber_pipeline.sandbox import agent_image, docker_engine
from amber_pipeline.sandbox.container import remove_sandboxes_under
from amber_pipeline.sandbox.egress import EgressProxy
from amber_pipeline.sandbox.engines import Engine
from amber_pipeline.sandbox.network import SandboxNetwork
from amber_pipeline.warehouse.schemas import TrialRecord, trial_key

if TYPE_CHECKING:
    from harbor.models.trial.result import TimingInfo, TrialResult
    from harbor.trial.trial import Trial

DEFAULT_CONCURRENCY = 2
WATCH_INTERVAL_SEC = 1.0
ENGINE_WAIT_SEC = 120.0  # how long a retry waits for a Docker engine that stopped answering
REMOTE_ENGINE_WAIT_SEC = 20.0  # as long for an engine on another machine: then the cell moves to another engine


@dataclass(frozen=True)
class CellRun:
    job_id: str
    cell: Cell
    benchmark: BenchmarkVersion
    trials_per_task: int
    run_dir: Path
    workspace: str
    private: bool = False  # a Workspace's own Benchmark: Task failures are Reward 0, not Errored
    prices: Prices = PRICES
    pool: Pool | None = None  # what is left of the Job's pool: model calls past it are refused
    allowed_providers: frozenset[str] | None = None  # a private Benchmark's Provider policy
    paths: AmberPaths | None = None  # where the Workspace's own Model Configurations live
    time_limits: Mapping[str, float] | None = None  # per Task, seconds a Trial may run before it is stopped
    engine_pool: str | None = None  # the engine pool it was placed on (`placement.py`); None: the local engine
    # (Task, attempt) of the Trials an earlier run of this cell in this Job stored scored: a run that resumes after
    # a crash, or goes on after `amber job continue`, keeps them and runs the others.
    done: frozenset[tuple[str, int]] = frozenset()
    # A Job that stops once decided (`jobs/stopping.py`): its Tasks' random order, the same for every cell, and how
    # its comparisons are decided; None for any other Job.
    stopping: StoppingRule | None = None

    def todo(self) -> list[tuple[TaskSpec, int]]:
        """The Trials this run owes, in the order they are asked for: attempt by attempt, Task by Task; in a Job
        that stops once decided, Task by Task in its order, each Task's attempts together."""
        if self.stopping is not None:
            by_name = {t.name: t for t in self.benchmark.tasks}
            return [(by_name[n], a) for n in self.stopping.order for a in range(1, self.trials_per_task + 1)
                    if (n, a) not in self.done]
        return [(t, a) for a in range(1, self.trials_per_task + 1) for t in self.benchmark.tasks
                if (t.name, a) not in self.done]

    def trial_record(self, task: TaskSpec, attempt: int, retry: int, outcome: outcomes.Outcome, *,
                     agent_version: str, model_configuration: str, usage: Usage, model_calls: int, cost: Decimal,
                     started: datetime, finished: datetime, trial_dir: str = "", image_id: str | None = None,
                     reported: tuple[int | None, int | None, float | None] = (None, None, None),
                     detail: str | None = None, phases: Phases | None = None) -> TrialRecord:
        """One Trial's row, whichever way it ran. Its tokens are what the model proxy metered; its cost is what
        the Wallet is charged, so 0 unless it scored; the Agent's own count (``reported``) goes beside."""
        return TrialRecord(
            workspace=self.workspace, job_id=self.job_id, cell_key=self.cell.key,
            benchmark_version_id=self.benchmark.id, task_name=task.name, attempt=attempt,
            trial_name=trial_name(task, attempt), agent=self.cell.agent, agent_version=agent_version,
            model_configuration=model_configuration, outcome=str(outcome.kind), reward=outcome.reward,
            errored=outcome.errored, retries=retry, error_type=outcome.error_type,
            error_message=outcome.error_message or detail, input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens, cost_usd=float(cost) if outcome.charged else 0.0,
            started_at=started, finished_at=finished, duration_sec=(finished - started).total_seconds(),
            image_id=image_id, trial_dir=trial_dir, cached_input_tokens=usage.cached_input_tokens,
            model_calls=model_calls, agent_input_tokens=reported[0], agent_output_tokens=reported[1],
            agent_cost_usd=reported[2], task_hash=self.benchmark.task_hash(task),
            **(asdict(phases) if phases is not None else {}))


@dataclass(frozen=True)
class Phases:
    """Where a sandboxed Trial's time went (`TrialRecord`): the parts a Quote prices from the Task's history
    (image, environment, Verifier) and from the cell's (the Agent)."""

    image_sec: float
    environment_sec: float
    agent_sec: float
    verifier_sec: float

    @classmethod
    def of(cls, result: TrialResult, image_sec: float, duration_sec: float) -> Phases:
        """From Harbor's phase timings and the sandbox's image time; the environment has the rest, so the four
        sum to the Trial's duration."""
        def span(timing: TimingInfo | None) -> float:
            if timing is None or timing.started_at is None or timing.finished_at is None:
                return 0.0
            return max((timing.finished_at - timing.started_at).total_seconds(), 0.0)

        agent = span(result.agent_setup) + span(result.agent_execution)
        verifier = span(result.verifier)
        image = min(image_sec, max(duration_sec - agent - verifier, 0.0))
        return cls(image, max(duration_sec - image - agent - verifier, 0.0), agent, verifier)


class TrialTimeLimitError(Exception):
    """A Trial ran past the wall-clock limit its cell run gave it, and was stopped."""


def trial_name(task: TaskSpec, attempt: int) -> str:
    return f"{task.name[:40]}__{attempt}"


@dataclass
class CellOutput:
    records: list[TrialRecord]
    calls: list[TranscriptCall]


def run_cell(run: CellRun, *, concurrency: int = DEFAULT_CONCURRENCY,
             on_trial_done: Callable[[TrialRecord], None] | None = None,
             keep_going: Callable[[], bool] | None = None,
             may_start: Callable[[], bool] | None = None) -> CellOutput:
    """Run the cell's Trials (Tasks x Trials per Task); one record per Trial that started, and their calls.

    Once ``keep_going`` says no, no Trial starts and those in flight are cancelled (the Job stopped); once
    ``may_start`` says no, no Trial starts and those in flight finish (the Job decided its comparisons)."""
    offline_litellm()
    engine = placement.engine_of(run.engine_pool)
    client = docker_engine.connect(engine)
    remove_sandboxes_under(run.run_dir, engine)  # left by an earlier run of this cell that was killed
    agent = agent_spec(run.cell.agent)
    mc = (model_configuration(run.cell.model_configuration, run.paths, run.workspace)
          if agent.needs_model else None)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        sandboxes = Sandboxes(engine=engine)
        hosts = ["127.0.0.1"]
        net = None
        # An Agent that runs in the sandbox reaches the model proxy, and Tasks with a network allowlist reach
        # their hosts through the egress proxy: on the sandbox network's gateway on this machine's engine, or at
        # 127.0.0.1 through a relay on another host's (`sandbox.relay`); without either, no network.
        networked = placement.needs_sandbox_network(run.cell.agent, run.benchmark.allowed_hosts)
        if networked and (engine is None or engine.local):
            net = stack.enter_context(SandboxNetwork.create(network_name(run.job_id, run.cell.key), client=client))
            sandboxes.network, sandboxes.gateway = net.name, net.gateway
        elif networked:
            sandboxes.gateway, sandboxes.relayed = "127.0.0.1", []
        if networked and agent.software is not None:
            sandboxes.software = agent_image.software_image(client, agent.name, agent.software)
            if net is not None:
                hosts.append(net.gateway)  # the model proxy listens there too
        if sandboxes.gateway is not None and run.benchmark.allowed_hosts:
            egress = stack.enter_context(EgressProxy(run.benchmark.allowed_hosts, host=sandboxes.gateway))
            sandboxes.reach(egress.port, net)
            sandboxes.egress_proxy = egress.url
        models = None
        if mc is not None:
            models = stack.enter_context(cell_models(mc, {t.name: t.instruction for t in run.benchmark.tasks},
                                                     Budget(run.pool, run.prices, mc), run.allowed_providers,
                                                     hosts))
            if sandboxes.gateway is not None and agent.software is not None:
                sandboxes.reach(models.proxy.port(sandboxes.gateway), net)
        runner = _CellRunner(run, agent, models, sandboxes, on_trial_done, keep_going or (lambda: True),
                             may_start or keep_going or (lambda: True))
        try:
            records = asyncio.run(runner.run_all(concurrency))
        finally:
            with contextlib.suppress(Exception):  # Harbor removes them; not when the engine restarted meanwhile
                remove_sandboxes_under(run.run_dir, engine)
        return CellOutput(records, models.calls if models else [])


@dataclass
class Sandboxes:
    """What a cell run's sandboxes are given: an installed Agent's software image, the network to the model
    proxy (or, on another host's engine, a relay to it), and the egress proxy to the network allowlist."""

    software: str | None = None
    network: str | None = None
    gateway: str | None = None
    egress_proxy: str | None = None  # the URL of the egress proxy to the Benchmark Version's allowlisted hosts
    engine: Engine | None = None  # the engine they run on (None: DOCKER_HOST or the local socket)
    relayed: list[int] | None = None  # on another host's engine: the proxies' ports each sandbox's relay carries

    def reach(self, port: int, net: SandboxNetwork | None) -> None:
        """Let the sandboxes reach a proxy's ``port`` at `gateway`: through the network's host guard, or their
        relays."""
        if net is not None:
            net.allow_host_port(port)
        elif self.relayed is not None:
            self.relayed.append(port)

    def kwargs(self) -> dict[str, str]:
        relay = ",".join(map(str, self.relayed)) if self.relayed else None
        kwargs = {"amber_network": self.network, "amber_agent_software": self.software,
                  "amber_egress_proxy": self.egress_proxy, "amber_engine": self.engine.name if self.engine else None,
                  "amber_relay": relay}
        return {k: v for k, v in kwargs.items() if v is not None}


def _confine_task_env(trial: Trial) -> None:
    """Fill the Task's env tables as if the server had no environment (`sandbox.task_env`) before the oracle and
    the Verifier read theirs, when they run (the oracle from a Task it loads again); the sandbox fills its own."""
    from harbor.agents.oracle import OracleAgent

    from amber_pipeline.sandbox import task_env  # deferred: imports Harbor

    task_env.confine(trial.task.config)
    if isinstance(trial.agent, OracleAgent):
        task_env.confine(trial.agent._task.config)


def network_name(job_id: str, cell_key: str) -> str:
    """The sandbox network of a Job's cell: one per cell run, found again by recovery when the run died."""
    return f"amber-{hashlib.sha256(f'{job_id}/{cell_key}'.encode()).hexdigest()[:16]}"


@dataclass
class _CellRunner:
    run: CellRun
    agent: AgentSpec
    models: CellModels | None
    sandboxes: Sandboxes
    on_trial_done: Callable[[TrialRecord], None] | None
    keep_going: Callable[[], bool]
    may_start: Callable[[], bool]

    @property
    def _proxy_host(self) -> str | None:
        """Where the Agent reaches the model proxy from inside a sandbox: the sandbox network's gateway, or
        127.0.0.1 through its relay."""
        return self.sandboxes.gateway if self.agent.software is not None else None

    def _going(self) -> bool:
        return not (self.models is not None and self.models.ceiling_reached) and self.keep_going()

    def _starting(self) -> bool:
        return not (self.models is not None and self.models.ceiling_reached) and self.may_start()

    async def run_all(self, concurrency: int) -> list[TrialRecord]:
        gate = asyncio.Semaphore(concurrency)
        work = [asyncio.ensure_future(self._one(gate, t, a)) for t, a in self.run.todo()]
        watcher = asyncio.ensure_future(self._watch(work))
        try:
            done = await asyncio.gather(*work)
        finally:
            watcher.cancel()
        return [r for r in done if r is not None]

    async def _watch(self, work: Sequence[asyncio.Future]) -> None:
        while not all(w.done() for w in work):
            await asyncio.sleep(WATCH_INTERVAL_SEC)
            if not await asyncio.to_thread(self._going):
                for w in work:
                    w.cancel()
                return

    async def _one(self, gate: asyncio.Semaphore, task: TaskSpec, attempt: int) -> TrialRecord | None:
        try:
            async with gate:
                if not await asyncio.to_thread(self._starting):
                    return None  # the Job stopped, or decided: no new Trial starts
                for retry in range(outcomes.MAX_RETRIES + 1):
                    record, retry_again = await self._trial(task, attempt, retry)
                    if not retry_again or retry == outcomes.MAX_RETRIES:
                        break
                    # An engine that is restarting fails every attempt at once: retry once it answers again. A
                    # placed engine that does not answer by then hands the cell back, to go to another one.
                    engine = self.sandboxes.engine
                    wait = ENGINE_WAIT_SEC if engine is None or engine.local else REMOTE_ENGINE_WAIT_SEC
                    if not await asyncio.to_thread(docker_engine.answers_within, wait, engine) and engine:
                        raise placement.EngineLost(engine)
        except asyncio.CancelledError:
            return None  # stopped before it began
        if self.on_trial_done is not None:
            self.on_trial_done(record)
        return record

    async def _trial(self, task: TaskSpec, attempt: int, retry: int) -> tuple[TrialRecord, bool]:
        from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
        from harbor.trial.trial import Trial

        run, models = self.run, self.models
        mc = models.mc if models else None
        name = trial_name(task, attempt)
        key = trial_key(run.job_id, run.cell.key, task.name, attempt)
        trial_dir = run.run_dir / name
        shutil.rmtree(trial_dir, ignore_errors=True)
        grant = None
        if models is not None:
            grant = models.open(key)
            harbor = harbor_agent(self.agent, litellm_prefix=models.mc.provider_spec.litellm_prefix,
                                  model=models.mc.model, proxy=models.proxy.base_url(self._proxy_host),
                                  token=grant.token)
        else:
            harbor = harbor_agent(self.agent)
        config = TrialConfig(
            task=TaskConfig(path=run.benchmark.task_path(task)),
            trials_dir=run.run_dir,
            trial_name=name,
            agent=AgentConfig(name=harbor.name, import_path=harbor.import_path, model_name=harbor.model_name,
                              kwargs=harbor.kwargs, env=harbor.env),
            environment=EnvironmentConfig(import_path="amber_pipeline.sandbox.environment:AmberSandbox",
                                          kwargs=self.sandboxes.kwargs()),
        )
        started = datetime.now(UTC)
        reported: tuple[int | None, int | None, float | None] = (None, None, None)
        image_id = None
        phases = None
        try:
            trial = await Trial.create(config)
            _confine_task_env(trial)
            limit = run.time_limits.get(task.name) if run.time_limits else None
            try:
                result = await asyncio.wait_for(trial.run(), limit)
            except TimeoutError as e:
                if limit is None or type(e) is not TimeoutError:  # Harbor's own timeouts are its subclasses
                    raise
                raise TrialTimeLimitError(f"stopped after {limit:.0f} s, its time limit") from None
            image_id = getattr(trial.agent_environment, "image_id", None)
            outcome = outcomes.from_harbor(result, private=run.private, provider_signals=CellModels.signals(grant))
            if result.agent_result is not None:
                a = result.agent_result
                reported = (a.n_input_tokens, a.n_output_tokens, a.cost_usd)
            started = result.started_at or started
            finished = result.finished_at or datetime.now(UTC)
            phases = Phases.of(result, getattr(trial.agent_environment, "image_sec", 0.0),
                               (finished - started).total_seconds())
        except asyncio.CancelledError as exc:  # the Job stopped while this Trial ran
            outcome = outcomes.from_exception(exc, private=run.private)
            finished = datetime.now(UTC)
        except Exception as exc:  # noqa: BLE001 - a failed Trial is a row, never a sunk cell
            outcome = outcomes.from_exception(exc, private=run.private, provider_signals=CellModels.signals(grant))
            finished = datetime.now(UTC)
        usage = models.close(grant, retry) if models is not None and grant is not None else Usage()
        record = run.trial_record(
            task, attempt, retry, outcome, agent_version=self.agent.agent_version(image_id),
            model_configuration=mc.name if mc else run.cell.model_configuration, usage=usage,
            model_calls=len(grant.calls) if grant else 0,
            cost=run.prices.trial_cost(mc, usage, (finished - started).total_seconds()), started=started,
            finished=finished, trial_dir=str(trial_dir), image_id=image_id, reported=reported, phases=phases)
        return record, outcome.retry
