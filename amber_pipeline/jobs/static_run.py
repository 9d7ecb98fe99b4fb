"""The static fast path: a cell of static Tasks run by the Direct Agent, with no container at all.

A static Trial is one conversation with the Model through the model proxy and
a check of the last answer by the built-in Verifier (`benchmarks.static`), so
it costs milliseconds, not seconds. The path keeps many Trials in flight on
one event loop and one HTTP client, and hands finished Trials to the caller
in batches (the caller charges a batch in one catalog transaction), because a
transaction per Trial would cost more than the Trial.

The rules are the container path's: every call goes through the proxy with
the attempt's own token and is metered there; Provider signals make the
attempt Errored and it is retried up to twice more; a call past what is left
of the Job's pool is refused and no new Trial starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

import aiohttp
import uvloop

from amber_pipeline.agents import direct
from amber_pipeline.agents.specs import agent_spec
from amber_pipeline.benchmarks import static
from amber_pipeline.benchmarks.tasks import TaskSpec
from amber_pipeline.jobs import outcomes
from amber_pipeline.jobs.budget import Budget
from amber_pipeline.jobs.cell_models import CellModels, cell_models
from amber_pipeline.jobs.trial_runner import CellOutput, CellRun
from amber_pipeline.models.configurations import model_configuration
from amber_pipeline.models.providers import Wire
from amber_pipeline.warehouse.schemas import TrialRecord, trial_key

CONCURRENCY = 16
BATCH = 200
STOPPING_BATCH = 16
WATCH_INTERVAL_SEC = 1.0


def run_static_cell(run: CellRun, *, on_batch: Callable[[list[TrialRecord]], None],
                    keep_going: Callable[[], bool] | None = None, concurrency: int = CONCURRENCY) -> CellOutput:
    """Run the cell's static Trials; each finished batch goes to ``on_batch`` (in order, one at a time). Once
    ``keep_going`` says no, no Trial starts; those in flight (a few milliseconds each) finish."""
    mc = model_configuration(run.cell.model_configuration, run.paths, run.workspace)
    instructions = {t.name: static.turns(t.instruction)[0] for t in run.benchmark.tasks}  # what a replay matches
    with cell_models(mc, instructions, Budget(run.pool, run.prices, mc), run.allowed_providers) as models:
        runner = _StaticRunner(run, models, on_batch, keep_going or (lambda: True))
        return asyncio.run(runner.run_all(concurrency), loop_factory=uvloop.new_event_loop)


class _StaticRunner:
    def __init__(self, run: CellRun, models: CellModels, on_batch: Callable[[list[TrialRecord]], None],
                 keep_going: Callable[[], bool]):
        self.run, self.models, self.mc, self.on_batch, self.keep_going = run, models, models.mc, on_batch, keep_going
        self.wire = "messages" if Wire.MESSAGES in self.mc.provider_spec.wires else "chat"
        self.base_url = models.proxy.base_url()
        self.version = agent_spec(run.cell.agent).agent_version(None)
        self.records: list[TrialRecord] = []
        self.pending: list[TrialRecord] = []
        self.flushing = asyncio.Lock()
        self.stopped = False
        # A Job that stops once decided looks at its comparisons after every batch: smaller ones stop it sooner.
        self.batch = BATCH if run.stopping is None else STOPPING_BATCH

    async def run_all(self, concurrency: int) -> CellOutput:
        connector = aiohttp.TCPConnector(limit=concurrency)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=660.0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
            gate = asyncio.Semaphore(concurrency)
            watcher = asyncio.ensure_future(self._watch())
            try:
                await asyncio.gather(*(self._one(client, gate, t, a) for t, a in self.run.todo()))
            finally:
                watcher.cancel()
            await self._flush(force=True)
        return CellOutput(self.records, self.models.calls)

    async def _watch(self) -> None:
        while not self.stopped:
            await asyncio.sleep(WATCH_INTERVAL_SEC)
            if not await asyncio.to_thread(self.keep_going):
                self.stopped = True

    async def _one(self, client: aiohttp.ClientSession, gate: asyncio.Semaphore, task: TaskSpec, attempt: int) -> None:
        async with gate:
            if self.stopped or self.models.ceiling_reached:
                return  # the Job stopped: no new Trial starts
            for retry in range(outcomes.MAX_RETRIES + 1):
                record, again = await self._trial(client, task, attempt, retry)
                if not again or retry == outcomes.MAX_RETRIES:
                    break
        self.records.append(record)
        self.pending.append(record)
        if len(self.pending) >= self.batch:
            await self._flush()

    async def _flush(self, force: bool = False) -> None:
        async with self.flushing:
            if not self.pending or (len(self.pending) < self.batch and not force):
                return
            batch, self.pending = self.pending, []
            await asyncio.to_thread(self.on_batch, batch)
            if self.run.stopping is not None and not await asyncio.to_thread(self.keep_going):
                self.stopped = True  # the batch decided the Job's comparisons

    async def _trial(self, client: aiohttp.ClientSession, task: TaskSpec, attempt: int,
                     retry: int) -> tuple[TrialRecord, bool]:
        run, private = self.run, self.run.private
        key = trial_key(run.job_id, run.cell.key, task.name, attempt)
        grant = self.models.open(key)
        started = datetime.now(UTC)
        task_dir = run.benchmark.task_path(task)
        assert task.static is not None
        try:
            reply = await direct.answer(client, self.base_url, grant.token, self.wire, self.mc.model,
                                        static.turns(task.instruction))
            verdict = (await asyncio.to_thread(static.verify, task.static, reply.text, task_dir)
                       if task.static.program else static.verify(task.static, reply.text, task_dir))
            outcome = outcomes.classify(exception_type=None, exception_message=None,
                                        rewards={"reward": verdict.reward}, private=private,
                                        provider_signals=CellModels.signals(grant))
            detail = verdict.detail or None
        except direct.CallFailed as exc:
            outcome = outcomes.from_status(exc.status, str(exc), private=private,
                                           provider_signals=CellModels.signals(grant))
            detail = None
        except (aiohttp.ClientError, TimeoutError) as exc:
            outcome = outcomes.classify(exception_type="APIConnectionError", exception_message=str(exc) or None,
                                        rewards=None, private=private, provider_signals=CellModels.signals(grant))
            detail = None
        usage = self.models.close(grant, retry)
        record = run.trial_record(
            task, attempt, retry, outcome, agent_version=self.version, model_configuration=self.mc.name, usage=usage,
            model_calls=len(grant.calls),
            cost=run.prices.trial_cost(self.mc, usage, 0.0),  # no sandbox: the model calls are the whole cost
            started=started, finished=datetime.now(UTC), detail=detail)
        return record, outcome.retry
