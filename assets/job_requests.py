"""Launching an Amber Job from the Dagster UI, and going on with one past its ceiling: in two launches, as the CLI's
`amber job quote` then `amber job start QUOTE`, so no single click moves money.

`submit_job`'s run config is the Job request itself (`jobs.request.JobRequest`: the launchpad shows its fields
and their descriptions) and the Workspace that pays; a relative Benchmark folder is read from the folder that holds
AMBER_HOME (`launchpad_benchmark`), and what the run config's own rules refuse is refused at Launch, before a run is
queued (`launch_refusal`, asked by Amber's run coordinator). It prices each cell and shows the Quote (each cell's price
per Trial and estimate, the total, the ceiling the Job would reserve, the smallest change it can detect) under
an id, its Job's (job-...), and reserves and writes nothing. `continue_job` (a Job, an optional amount) likewise
shows what going on with the Job past its ceiling would reserve, under a Quote id of its own (quote-...).

`start_quote`, launched with that id by the same user within the hour, confirms it: it reserves the Quote from
the Workspace's Wallet and starts the Job (or runs its missing Trials) as `amber job submit` or `amber job
continue` do, tags its run with the Job, and asks for the cell runs as the CLI does
(`worker_socket.start_cell_runs`). A new Job's Quote is the one submit_job showed, each cell's price reserved as
shown and not priced again (`lifecycle.quote` given ``shown``: every check that can refuse runs again, and a
Benchmark folder whose Tasks changed since is refused); a continuation is priced again and refused above the
amount shown. Each run records how many times it priced the request (`pricings` in its output's metadata).

Who acts: behind `amber serve`, the user signed in to /ui (`accounts/launches.py`: the sign-in gate gives each run
it launches a launch id only it issues, which the run claims); a Workspace that user is not a member of is
refused in one sentence, and the Job's submitter and the audit log name them. Launched on the server's host
(`amber ui`), the embedded default's user acts, as on the CLI.
"""


import contextlib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import dagster as dg
from pydantic import BaseModel, Field, ValidationError

from amber_pipeline import worker_socket
from amber_pipeline.accounts import audit, identity, launches, workspaces
from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE
from amber_pipeline.analysis.plan import detectable_change_sentence
from amber_pipeline.benchmarks import registry
from amber_pipeline.benchmarks.tasks import no_benchmark
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.jobs import lifecycle, quotes
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money.amounts import parse_amount
from amber_pipeline.money.prices import show
from amber_pipeline.operations.operation import Acting
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from assets.cell_job import JOB_TAG
from assets.resources import WarehouseResource

QUOTE_TAG = "amber/quote"  # the continuation Quote a continue_job run shows, and start_quote reserves
SUBMIT_JOB, CONTINUE_JOB = "submit_job", "continue_job"


class Shown(BaseModel):
    """A Quote as submit_job or continue_job showed it, nothing reserved: what start_quote confirms."""

    id: str  # the new Job's id (submit_job), or the continuation Quote's (continue_job)
    job_name: Literal["submit_job", "continue_job"]
    user: str  # whom it was shown to: only they confirm it
    workspace: str
    job_id: str
    reserves: Decimal  # what confirming it reserves: the most start_quote may reserve
    shown_at: datetime
    request: JobRequest | None = None  # submit_job's Job request
    amount: str | None = None  # continue_job's amount, as typed
    # submit_job's pricing, which start_quote reserves as shown (None: shown before Quotes were kept so)
    benchmark_version_id: str | None = None
    cells: list[quotes.CellQuote] | None = None

    def as_priced(self) -> lifecycle.ShownQuote | None:
        """The Quote as priced, for `lifecycle.quote` to make as shown; None for a continuation (priced again)."""
        if self.benchmark_version_id is None or self.cells is None:
            return None
        return lifecycle.ShownQuote(self.id, self.benchmark_version_id, self.cells, self.shown_at)

    def next_step(self) -> str:
        what = "start the Job" if self.job_name == SUBMIT_JOB else f"run Job {self.job_id}'s missing Trials"
        return (f"Nothing is reserved yet: to reserve {show(self.reserves)} from {self.workspace}'s Wallet and "
                f"{what}, launch start_quote with quote_id {self.id} within the hour.")


class SubmitJobConfig(JobRequest, dg.Config):
    benchmark: str = Field(description="A Benchmark Version label name@N, or a Benchmark folder on the Amber host: "
                                       "a relative path is read from the folder that holds AMBER_HOME (with the "
                                       "default ./.amber, the folder you run `amber` in).")
    workspace: str = Field(DEFAULT_WORKSPACE, description="The Workspace whose Wallet pays for the Job: one you "
                                                          "are a member of.")

    def request(self, paths: AmberPaths) -> JobRequest:
        """The Job request, its Benchmark folder read by the launchpad's rule (`launchpad_benchmark`)."""
        return JobRequest.model_validate(self.model_dump(exclude={"workspace"}) | {
            "benchmark": launchpad_benchmark(self.benchmark, paths)})


def launchpad_benchmark(benchmark: str, paths: AmberPaths) -> str:
    """The launchpad's `benchmark` as the CLI reads it: a label stays a label, and a relative folder is read from the
    folder that holds AMBER_HOME, not from wherever Dagster runs the step (the install folder). A user runs `amber`
    (and `amber ui`) where `./.amber` is, by default, so a path typed in the launchpad reads as the same path typed
    after `amber job submit` there."""
    path = Path(benchmark).expanduser()
    if path.is_absolute():
        return str(path)
    folder = paths.home.parent / path
    if registry.LABEL.match(benchmark) and not folder.exists():
        return benchmark
    return str(folder)


# What the launchpad opens with: the demo Job, its folder named whole since a relative one is read from the folder
# that holds AMBER_HOME (the schema mixes in dg.Config, so it is built by validation)
DEMO_REQUEST = SubmitJobConfig.model_validate({"benchmark": str(PROJECT_ROOT / "examples" / "demo-bench"),
                                               "bounds": True,
                                               "model_configurations": ["replay-strong", "replay-weak"]})
QUOTE_COLUMNS = dg.TableSchema(columns=[
    dg.TableColumn(name, kind) for name, kind in (
        ("cell", "string"), ("tasks", "int"), ("trials_per_task", "int"), ("per_trial_usd", "string"),
        ("estimate_usd", "string"), ("basis", "string"))])
MISSING_COLUMNS = dg.TableSchema(columns=[
    dg.TableColumn(name, kind) for name, kind in (
        ("cell", "string"), ("tasks", "int"), ("trials", "int"), ("estimate_usd", "string"))])


@contextlib.contextmanager
def _refused_in_one_sentence() -> Iterator[None]:
    """A refusal a user can fix fails the step with its sentence alone, shown as the run's failure (no traceback)."""
    try:
        yield
    except AmberError as refusal:
        raise dg.Failure(description=str(refusal), allow_retries=False) from None


@contextlib.contextmanager
def _acting(context: dg.OpExecutionContext, wh: Warehouse, workspace: str) -> Iterator[Acting]:
    """The user this run acts for (see the module's docstring) in `workspace`, membership checked. In the block
    their actions are theirs in the audit log, and a user signed in to /ui holds only the roles given to them
    (the embedded default's "the local login is staff" is not theirs)."""
    launch_id = context.run.tags.get(launches.LAUNCH_TAG)
    with _refused_in_one_sentence():
        user = launches.user_of(wh, launch_id, context.run_id)
    context.instance.add_run_tags(context.run_id, {launches.USER_TAG: user})
    signed_in = identity.SIGNED_IN.set(user) if launch_id is not None else None
    try:
        with _refused_in_one_sentence(), audit.acting_as(user):
            actor = identity.Actor(user, workspace)
            yield Acting(wh, actor, workspaces.acting_workspace(wh, actor))
    finally:
        if signed_in is not None:
            identity.SIGNED_IN.reset(signed_in)


def _show(context: dg.OpExecutionContext, shown: Shown, metadata: dict) -> dg.Output:
    context.log.info(shown.next_step())
    return dg.Output(shown.model_dump(mode="json"), "quote", metadata={
        "quote_id": shown.id, "workspace": shown.workspace, "shown_to": shown.user,
        "ceiling_usd": show(shown.reserves), **metadata, "next_step": shown.next_step(),
        "quote": dg.MetadataValue.json(shown.model_dump(mode="json"))})


@dg.op(description="Price each cell and show the Quote; nothing is reserved until start_quote confirms it.",
       out={"quote": dg.Out(dict, description="The Quote shown: its id, what confirming it reserves, and the "
                                              "request.")})
def quote_job(context: dg.OpExecutionContext, config: SubmitJobConfig, warehouse: WarehouseResource) -> dg.Output:
    wh = warehouse.get()
    with _refused_in_one_sentence():
        request = config.request(wh.paths)
    with _acting(context, wh, config.workspace) as acting, lifecycle.pricings() as priced_times:
        quoted = lifecycle.price(wh, acting.workspace, acting.actor.user, request)  # what starting it reserves
    priced = quoted.estimate
    # The Job's id names the Quote until start_quote makes the Job under it (once, however often it is asked).
    job_id = lifecycle.new_job_id()
    as_priced = quoted.shown(job_id)
    shown = Shown(id=job_id, job_name=SUBMIT_JOB, user=acting.actor.user, workspace=acting.workspace, job_id=job_id,
                  reserves=quoted.amount, shown_at=as_priced.shown_at, request=request,
                  benchmark_version_id=as_priced.benchmark_version_id, cells=as_priced.cells)
    context.instance.add_run_tags(context.run_id, {JOB_TAG: job_id})
    detectable = detectable_change_sentence(priced.n_tasks)
    context.log.info(f"Quote for {priced.label}: {show(priced.total)} over {len(priced.cells)} cells. {detectable}")
    return _show(context, shown, {
        "benchmark": priced.label, "estimate_usd": show(priced.total), "detectable_change": detectable,
        "pricings": priced_times(),
        "cells": dg.MetadataValue.table([dg.TableRecord({
            "cell": c.label, "tasks": c.n_tasks, "trials_per_task": c.trials_per_task,
            "per_trial_usd": show(Decimal(c.cost_per_trial)), "estimate_usd": show(c.estimated), "basis": c.basis})
            for c in priced.quoted], schema=QUOTE_COLUMNS)})


@dg.job(description="Quote an Amber Job: a Benchmark against Agent x Model Configuration pairs, priced per cell. "
                    "Nothing is reserved: launch start_quote with the Quote's id to reserve it and start the Job.",
        executor_def=dg.in_process_executor,
        config=dg.RunConfig(ops={"quote_job": DEMO_REQUEST}))
def submit_job():
    quote_job()


class ContinueJobConfig(dg.Config):
    workspace: str = Field(DEFAULT_WORKSPACE, description="The Workspace of the Job, whose Wallet pays.")
    job_id: str = Field(description="The Job to go on with (job-...): one that stopped at its ceiling, was "
                                    "cancelled, or runs near its ceiling.")
    amount: str | None = Field(None, description="Dollars to reserve instead of the estimate of the missing "
                                                 "Trials: a plain amount, like 12.50.")


@dg.op(description="Price the Job's missing Trials and show what going on with it would reserve; nothing is "
                   "reserved until start_quote confirms it.",
       out={"quote": dg.Out(dict, description="The Quote shown: its id and what confirming it reserves.")})
def quote_continuation(context: dg.OpExecutionContext, config: ContinueJobConfig,
                       warehouse: WarehouseResource) -> dg.Output:
    wh = warehouse.get()
    with _acting(context, wh, config.workspace) as acting, lifecycle.pricings() as priced_times:
        priced = lifecycle.price_continuation(wh, acting.workspace, config.job_id, config.amount)
    shown = Shown(id=quotes.new_quote_id(), job_name=CONTINUE_JOB, user=acting.actor.user, workspace=acting.workspace,
                  job_id=priced.job.id, reserves=priced.amount, shown_at=datetime.now(UTC), amount=config.amount)
    context.instance.add_run_tags(context.run_id, {JOB_TAG: shown.job_id, QUOTE_TAG: shown.id})
    return _show(context, shown, {
        "job": priced.job.id, "benchmark": priced.job.benchmark_label, "estimate_usd": show(priced.estimate),
        "pool_left_usd": show(priced.left), "pricings": priced_times(),
        "cells": dg.MetadataValue.table([dg.TableRecord({
            "cell": m.route, "tasks": len(m.tasks), "trials": sum(t.trials for t in m.tasks),
            "estimate_usd": show(m.cost_usd)}) for m in priced.missing], schema=MISSING_COLUMNS)})


@dg.job(description="Price going on with an Amber Job past its ceiling (or after a cancel): its missing Trials, as "
                    "`amber job continue` would reserve them. Nothing is reserved: launch start_quote with the "
                    "Quote's id to reserve it and run them in the same Job.",
        executor_def=dg.in_process_executor)
def continue_job():
    quote_continuation()


class StartQuoteConfig(dg.Config):
    quote_id: str = Field(description="The Quote submit_job or continue_job showed you, by the id it gave: job-... "
                                      "for a new Job, quote-... to go on with one.")


def _shown(instance: dg.DagsterInstance, quote_id: str) -> Shown:
    """The Quote a submit_job or continue_job run showed under `quote_id`, as that run's step recorded it (what
    a launch's tags say is not trusted: the step's own output is), if it was shown within the hour."""
    for job_name, tag in ((SUBMIT_JOB, JOB_TAG), (CONTINUE_JOB, QUOTE_TAG)):
        for run in instance.get_runs(dg.RunsFilter(job_name=job_name, tags={tag: quote_id},
                                                   statuses=[dg.DagsterRunStatus.SUCCESS])):
            for event in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_OUTPUT):
                recorded = event.dagster_event.step_output_data.metadata.get("quote") if event.dagster_event else None
                if isinstance(recorded, dg.JsonMetadataValue):
                    shown = Shown.model_validate(recorded.data)
                    if shown.id == quote_id:
                        if datetime.now(UTC) - shown.shown_at > quotes.LIFETIME:
                            raise AmberError(f"Quote {quote_id} was shown more than an hour ago: launch "
                                             f"{shown.job_name} again to see a new one.")
                        return shown
    raise NotFound(f"No Quote {quote_id} was shown: launch submit_job (or continue_job) and start the id it shows.")


@dg.op(description="Confirm a Quote submit_job or continue_job showed you: reserve it from the Wallet and start the "
                   "Job (or run its missing Trials); its cell runs start at once.")
def confirm_quote(context: dg.OpExecutionContext, config: StartQuoteConfig, warehouse: WarehouseResource) -> str:
    wh = warehouse.get()
    with _refused_in_one_sentence():
        shown = _shown(context.instance, config.quote_id)
    with _acting(context, wh, shown.workspace) as acting, lifecycle.pricings() as priced_times:
        user = acting.actor.user
        if user != shown.user:
            raise AmberError(f"Quote {shown.id} was shown to {shown.user}, not to {user}: launch "
                             f"{shown.job_name} yourself to see a Quote of your own.")
        # The Job's id (and the continuation's) are the Quote's as shown, so a run resumed after its worker died
        # makes the same Job or continuation, not a second one; its tags put it among the Job's runs.
        context.instance.add_run_tags(context.run_id, {JOB_TAG: shown.job_id} | (
            {QUOTE_TAG: shown.id} if shown.job_name == CONTINUE_JOB else {}))
        if shown.request is not None and (as_priced := shown.as_priced()) is not None:
            made, _ = lifecycle.submit(wh, acting.workspace, user, shown.request, shown=as_priced)
        elif shown.request is not None:
            made, _ = lifecycle.submit(wh, acting.workspace, user, shown.request, job_id=shown.id,
                                       at_most=shown.reserves)
        else:
            made = lifecycle.continue_job(wh, acting.workspace, shown.job_id, shown.amount, quote_id=shown.id,
                                          at_most=shown.reserves)
    worker_socket.start_cell_runs(wh.paths, made.job_id)  # now, not at the sensor's next tick
    context.add_output_metadata({"job": made.job_id, "benchmark": made.benchmark_label, "quote": made.id,
                                 "reserved_usd": show(made.amount), "by": user, "pricings": priced_times()})
    context.log.info(f"{user} reserved {show(made.amount)} for {made.job_id} ({made.id}); its cell runs start "
                     "now")
    return made.job_id


@dg.job(description="Confirm a Quote that submit_job or continue_job showed you, by its id: reserve it from the "
                    "Wallet and start the Job (or run its missing Trials), as `amber job start` does.",
        executor_def=dg.in_process_executor)
def start_quote():
    confirm_quote()


# The op whose config each launchpad job takes: where a refusal points in the run config
LAUNCHPAD_OPS = {SUBMIT_JOB: "quote_job", CONTINUE_JOB: "quote_continuation", "start_quote": "confirm_quote"}


def launch_refusal(instance: dg.DagsterInstance, job_name: str, run_config: Mapping[str, Any],
                   paths: AmberPaths) -> AmberError | None:
    """What a launchpad job's run would refuse at once, found before it is queued (Amber's run coordinator asks):
    the refusal's sentence, with the field it is about (`AmberError.field`); None when nothing is wrong yet.

    Only the rules that need no user are checked here: the run config's own (a Model Configuration that does not
    exist, Trials per Task out of range, an Agent Amber does not ship, a Benchmark folder that is not there, an
    amount that is not plain, a Quote never shown). Membership and the Wallet are the run's to check, as it knows
    who acts; a label is found by the run too, since which labels exist depends on the Workspace."""
    op = LAUNCHPAD_OPS.get(job_name)
    config = ((run_config.get("ops") or {}).get(op) or {}).get("config") if op else None
    if config is None:  # not a launchpad job, or its default config (the demo Job), which holds
        return None
    try:
        if job_name == SUBMIT_JOB:
            submit = SubmitJobConfig.model_validate(config)
            request = submit.request(paths)
            request.check(paths, submit.workspace)
            if not registry.LABEL.match(request.benchmark):
                folder = Path(request.benchmark)
                if paths.holds(folder) or not folder.exists():
                    refusal = no_benchmark(folder)
                    refusal.field = "benchmark"
                    raise refusal
        elif job_name == CONTINUE_JOB:
            amount = ContinueJobConfig.model_validate(config).amount
            if amount is not None:
                try:
                    parse_amount(amount, "--amount")
                except AmberError as e:
                    e.field = "amount"
                    raise
        else:
            try:
                _shown(instance, StartQuoteConfig.model_validate(config).quote_id)
            except AmberError as e:
                e.field = "quote_id"
                raise
    except AmberError as refusal:
        return refusal
    except ValidationError:  # Dagster's schema let through what pydantic's refuses: the run says so, as before
        return None
    return None
