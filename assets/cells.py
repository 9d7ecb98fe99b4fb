"""Cell assets: a cell's Trials, its per-Task Rewards, and its aggregate score.

A cell is one (Benchmark Version, Agent Version, Model Configuration) triple,
one partition of `cells`. A cell run is launched by `job_request_sensor` for one
Job (the run tag `amber/job`), runs that Job's Trials of the cell, then
recomputes the cell's Rewards and score over all its stored Trials.
"""


import dagster as dg

from amber_pipeline.analysis import plots
from amber_pipeline.cells import NO_MODEL
from amber_pipeline.jobs import cell_run
from amber_pipeline.scoring import store
from assets.resources import WarehouseResource

JOB_TAG = "amber/job"

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
    wh = warehouse.get()

    def progress(record) -> None:
        outcome = "Errored" if record.errored else f"Reward {record.reward}"
        context.log.info(f"Trial {record.trial_name}: {outcome} in {record.duration_sec:.1f} s")

    records = cell_run.run_trials(wh, job_id, context.partition_key, on_trial_done=progress)
    errored = sum(r.errored for r in records)
    return dg.MaterializeResult(metadata={
        "job": job_id, "trials": len(records), "errored": errored,
        "cost_usd": round(sum(r.cost_usd for r in records), 6)})


REWARDS = dg.AssetSpec(
    "rewards", deps=[trials], group_name="amber", kinds={"parquet"},
    description="Rewards of this cell per Task: the mean Reward of each Task over its scored Trials, with the "
                "number of Trials and of Errored Trials (which have no Reward and are left out of the mean).")
CELL_AGGREGATES = dg.AssetSpec(
    "cell_aggregates", deps=["rewards"], group_name="amber", kinds={"parquet"},
    description="The cell's score: mean Reward averaged per Task, then across Tasks, with a 95% bootstrap "
                "confidence interval resampled over Tasks (10,000 seeded resamples); its total cost, mean Trial "
                "duration and the number of Errored Trials, shown apart. One score per Workspace that ran the cell.")


@dg.multi_asset(specs=[REWARDS, CELL_AGGREGATES], partitions_def=cells, can_subset=False)
def cell_scores(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
    """Scores the cell over all its stored Trials with the scoring engine: its per-Task Rewards and its score."""
    wh = warehouse.get()
    scores = store.write_cell(wh, context.partition_key)
    one_workspace = len(scores.cells) == 1
    rewards_md = "| Workspace | Task | Trials | Errored | mean Reward |\n|---|---|---|---|---|\n" + "\n".join(
        f"| {c.scope} | {task} | {n} | {errored} | {'-' if mean is None else round(mean, 3)} |"
        for c in scores.cells for task, n, errored, mean in zip(
            *(c.task_rewards[k].to_pylist() for k in ("task", "n_trials", "n_errored", "mean_reward")), strict=True))
    yield dg.MaterializeResult(asset_key="rewards", metadata={
        "tasks": sum(c.task_rewards.num_rows for c in scores.cells), "rewards": dg.MetadataValue.md(rewards_md)})

    md = "| Workspace | cell | Tasks | Trials | mean Reward | 95% CI | cost (USD) | mean duration | Errored |\n"
    md += "|---|---|---|---|---|---|---|---|---|\n"
    for c in scores.cells:
        md += (f"| {c.scope} | {c.label} | {c.n_tasks} | {c.n_trials} | {c.mean:.3f} | "
               f"[{c.ci95.low:.3f}, {c.ci95.high:.3f}] | {c.cost_usd:.4f} | "
               f"{c.mean_duration_sec:.1f} s | {c.errored} |\n")
    metadata: dict[str, dg.RawMetadataValue] = {"workspaces": len(scores.cells),
                                                "cell_results": dg.MetadataValue.md(md)}
    with wh.query() as con:
        neighbours = con.execute(
            """select workspace, agent, model_configuration, mean_reward, ci_low, ci_high from cell_aggregates
               where benchmark_version_id in (select benchmark_version_id from cell_aggregates where cell_key = ?)
                 and workspace in (select workspace from cell_aggregates where cell_key = ?)""",
            [context.partition_key, context.partition_key]).fetchall()
    if neighbours:
        one_scope = len({w for w, *_ in neighbours}) == 1

        def label(workspace: str, agent: str, mc: str) -> str:
            name = agent if mc == NO_MODEL else f"{agent} / {mc}"
            return name if one_scope else f"{workspace}: {name}"

        rows = [plots.Row(label(w, agent, mc), mean, low, high) for w, agent, mc, mean, low, high in neighbours]
        metadata["plot"] = dg.MetadataValue.md(plots.markdown_image(
            lambda path: plots.forest(rows, [], path, title="Cells of this Benchmark Version")))
    if one_workspace:
        c = scores.cells[0]
        metadata |= {"mean_reward": dg.MetadataValue.float(float(c.mean)),
                     "ci95": f"[{c.ci95.low:.3f}, {c.ci95.high:.3f}]", "errored": c.errored}
    yield dg.MaterializeResult(asset_key="cell_aggregates", metadata=metadata)


cell_job = dg.define_asset_job(
    "cell_job", selection=[trials, cell_scores], executor_def=dg.in_process_executor,
    description="Runs one cell of a Job: its Trials, then the cell's Rewards and aggregate score.")
