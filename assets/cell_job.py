"""Cell assets: a cell's Trials, its per-Task Rewards, and its aggregate score.

A cell is one (Benchmark Version, Agent Version, Model Configuration) triple,
one partition of `cells`, named for people (`demo-bench@1/terminus-2/replay-strong`;
its key, with the hashes, is the run tag `amber/cell`). A cell run is launched
for one Job (the run tag `amber/job`) as the Job starts (`launcher/cell_runs.py`);
it runs that Job's Trials of the cell, then scores every cell of the Benchmark
Version and compares them, and only then marks the cell done. For a Job that
stops once decided, the cell's score also shows where the Job's comparisons
stand and what stopping saved.
"""

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

import dagster as dg

from amber_pipeline.errors import NotFound
from amber_pipeline.jobs import cell_names, records, stopping
from amber_pipeline.jobs.decisions import Stopping
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord
from assets import metadata_tables
from assets.resources import WarehouseResource

# The cell run's code (Harbor, Docker, Arrow) is imported by the asset functions, not here: every code server loads
# these definitions to list them, and never runs a cell (0.4 s of CPU at each start of one). The warm worker imports
# it for its forks (`launcher.warm_worker.PRELOAD`).
JOB_TAG = "amber/job"
CELL_TAG = "amber/cell"

CELLS = "cells"
cells = dg.DynamicPartitionsDefinition(name=CELLS)


@dg.asset(partitions_def=cells, group_name="amber", kinds={"docker", "parquet"})
def trials(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """Trials of this cell for one Job: each Task attempted Trials-per-Task times by the cell's Agent and
    Model Configuration in a Docker sandbox, through Harbor's trial engine. One Parquet file of Trial rows
    (Reward, or Errored with its reason; tokens; cost; duration) per cell and Job."""
    job_id = context.run.tags.get(JOB_TAG)
    if not job_id:
        raise dg.Failure("This cell run names no Job: submit Jobs with `amber job submit` or the submit_job job.")
    from amber_pipeline.jobs import cell_run  # imported where run: see the note over JOB_TAG

    wh = warehouse.get()
    records = cell_run.run_trials(wh, job_id, cell_names.key_of(wh, context.partition_key),
                                  on_trials_done=lambda done: context.log.info(trials_line(done)))
    errored = sum(r.errored for r in records)
    return dg.MaterializeResult(metadata={
        "job": job_id, "trials": len(records), "errored": errored,
        "cost_usd": round(sum(r.cost_usd for r in records), 6)})


def trials_line(records: Sequence[TrialRecord]) -> str:
    """The run's log line for Trials stored together: a container's Trial has a line of its own; a static cell's
    batch (hundreds a second) is summed up on one, since each line is a row written to the run's event log, which
    costs more than a static Trial."""
    if len(records) == 1:
        (r,) = records
        return f"Trial {r.trial_name}: {_outcome(r)} in {r.duration_sec:.1f} s"
    if not records:
        return "No Trial was stored."
    counts = Counter(_outcome(r) for r in records)
    mean = sum(r.duration_sec for r in records) / len(records)
    return (f"{len(records)} Trials, {records[0].trial_name} to {records[-1].trial_name}: "
            + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) + f"; {mean:.1f} s each on average")


def _outcome(record: TrialRecord) -> str:
    return "Errored" if record.errored else f"Reward {record.reward}"


NO_JOB = ("trials runs the Trials of a Job, so only that Job's cell runs materialize it: quote a Job with "
          "submit_job (or `amber job submit`), or materialize rewards and cell_aggregates to score the cell again "
          "from its stored Trials.")


def launch_refusal(step_keys: Collection[str], tags: Mapping[str, str]) -> str | None:
    """The sentence refusing a run that would run a cell's Trials for no Job (Materialize on `trials` in the UI),
    found before it is queued (Amber's run coordinator asks), so no step fails and the cell keeps its state; None
    for any other run. Re-scoring a cell (rewards and cell_aggregates alone) needs no Job: it is left to run."""
    return NO_JOB if trials.op.name in step_keys and not tags.get(JOB_TAG) else None


REWARDS = dg.AssetSpec(
    "rewards", deps=[trials], group_name="amber", kinds={"parquet"},
    description="Rewards of this cell per Task: the mean Reward of each Task over its scored Trials, with the "
                "number of Trials and of Errored Trials (which have no Reward and are left out of the mean).")
CELL_AGGREGATES = dg.AssetSpec(
    "cell_aggregates", deps=["rewards"], group_name="amber", kinds={"parquet"},
    description="The cell's score: mean Reward averaged per Task, then across Tasks, with a 95% bootstrap "
                "confidence interval resampled over Tasks (10,000 seeded resamples); its total cost, mean Trial "
                "duration and the number of Errored Trials, shown apart. One score per Workspace that ran the cell. "
                "A cell run of a Job that stops once decided also shows the Job's decision (job_decision).")


@dg.multi_asset(specs=[REWARDS, CELL_AGGREGATES], partitions_def=cells, can_subset=False)
def cell_scores(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
    """Scores every cell of this cell's Benchmark Version over all their stored Trials with the scoring engine
    and compares them, then marks the Job's cell done: its per-Task Rewards, its score beside its neighbours',
    and every comparison, its version's made again (recorded as a materialization of `comparisons`); for a Job
    that stops once decided, where its comparisons stand and what stopping saved."""
    from amber_pipeline.jobs import cell_run  # imported where run: see the note over JOB_TAG

    wh = warehouse.get()
    key = cell_names.key_of(wh, context.partition_key)
    scores = cell_run.store_results(wh, key, context.run.tags.get(JOB_TAG))
    names = cell_names.read(wh, [c.cell for c in scores.cells])
    ours = [c for c in scores.cells if c.cell == key]
    yield dg.MaterializeResult(asset_key="rewards", metadata={
        "cell": key, "tasks": sum(c.task_rewards.num_rows for c in ours), "rewards": metadata_tables.rewards(ours)})

    metadata: dict[str, dg.RawMetadataValue] = {
        "cell": key, "workspaces": len(ours),
        "cells": metadata_tables.cells(scores.cells, names, key)}
    if len(ours) == 1:
        c = ours[0]
        metadata |= {"mean_reward": dg.MetadataValue.float(float(c.mean)),
                     "ci95": f"[{c.ci95.low:.3f}, {c.ci95.high:.3f}]", "errored": c.errored}
    if scores.cells:
        metadata["plot"] = dg.MetadataValue.md(metadata_tables.version_plots(scores.cells, names))
    if (stopped := _stopping(wh, context.run.tags.get(JOB_TAG))) is not None:
        metadata["job_decision"] = metadata_tables.decision(stopped)
    yield dg.MaterializeResult(asset_key="cell_aggregates", metadata=metadata)
    if scores.cells:
        context.log_event(dg.AssetMaterialization(
            "comparisons", description="Every comparison, this cell's Benchmark Version's compared again as the "
                                       "cell finished.",
            metadata=metadata_tables.comparisons(wh)))


def _stopping(wh: Warehouse, job_id: str | None) -> Stopping | None:
    """The run's Job's decision and savings, when it is a Job that stops once decided (`stopping.summary`)."""
    if job_id is None:
        return None
    try:
        job = records.get_job(wh, job_id, None)
    except NotFound:  # a run tagged with a Job no longer there: its scores are still shown
        return None
    return stopping.summary(wh, job)


cell_job = dg.define_asset_job(
    "cell_job", selection=[trials, cell_scores], executor_def=dg.in_process_executor,
    description="Runs one cell of a Job: its Trials, then the cell's Rewards and aggregate score. A run whose worker "
                "died is resumed (twice at most, by run monitoring) and keeps the Trials already stored.")
