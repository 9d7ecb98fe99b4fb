"""One cell run: the Job's Trials of one cell, charged and stored, then the results scored.

Two steps, the two assets of a cell run. :func:`run_trials` writes Trial rows
(one Parquet file per cell and Job), the model proxy's transcripts of their
calls (one file per day, cell and Job) and ledger entries. :func:`store_results`
then has the scoring engine score every cell of the Benchmark Version and
compare them (`scoring.store.write_version`), and only then marks the cell
done: a Job is completed when its last cell's results are stored, so whoever
waits for the Job reads a finished report. Evidence and failure causes are
derived when read. :func:`run_cell_of_job` does both, for callers outside Dagster.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import date

import pyarrow as pa

from amber_pipeline import failpoints
from amber_pipeline.agents.specs import agent_spec
from amber_pipeline.jobs import harbor_job, lifecycle, placement, records, recovery, stopping
from amber_pipeline.jobs.cell_models import TranscriptCall
from amber_pipeline.jobs.outcomes import Kind, ProviderSignal
from amber_pipeline.jobs.static_run import run_static_cell
from amber_pipeline.jobs.trial_runner import CellRun, run_cell
from amber_pipeline.money.prices import PRICES, Prices
from amber_pipeline.scoring import engine, store
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TRANSCRIPT_SCHEMA, TrialRecord, trials_table


def run_trials(wh: Warehouse, job_id: str, cell_key: str,
               on_trials_done: Callable[[list[TrialRecord]], None] | None = None,
               prices: Prices = PRICES) -> list[TrialRecord]:
    """Run the Job's Trials of one cell and store them; a cell that could not run is marked failed (one that
    ran waits for :func:`store_results`).

    An earlier run of the cell in this Job (one that died, or one that stopped at the Job's ceiling before
    `amber job continue`) may have stored Trials already: the scored ones are kept, charged now if their run
    died before it charged them (each once), and only the others run. Those that ran go to ``on_trials_done`` as
    they are stored: one at a time for a container's Trials, a batch at a time for static ones.

    Whatever fails, from the cell's first read on, ends the cell failed (its Job settles), since a cell left
    pending by a run that failed would hold its Job open forever: nothing launches a cell that has a run.
    """
    try:
        return _run_trials(wh, job_id, cell_key, on_trials_done, prices)
    except placement.EngineLost as lost:
        lifecycle.move_cell(wh, job_id, cell_key, str(lost))  # placed again at the next claim
        raise
    except BaseException as exc:
        _failed(wh, job_id, cell_key, exc)
        raise


def _run_trials(wh: Warehouse, job_id: str, cell_key: str,
                on_trials_done: Callable[[list[TrialRecord]], None] | None, prices: Prices) -> list[TrialRecord]:
    run = lifecycle.open_cell_run(wh, job_id, cell_key, prices)
    if not lifecycle.start_cell(wh, job_id, cell_key):  # cancelled or at its ceiling before this run began
        return []
    rows = wh.trials_file(run.cell.file_id, job_id)
    kept = [r for r in recovery.settle_rows(wh, job_id, cell_key) if r.outcome == Kind.SCORED]
    run = replace(run, done=frozenset((r.task_name, r.attempt) for r in kept))
    stored: list[TrialRecord] = list(kept)

    def finished(records: list[TrialRecord]) -> None:
        # A Trial's row is on disk before its charge, so a run killed at any point leaves every charged Trial
        # with its row, and the next run (or recovery) charges what was not charged yet.
        stored.extend(records)
        wh.write_parquet(trials_table(stored), rows)
        failpoints.reach("after_rows")
        changed = lifecycle.charge_records(wh, job_id, records)
        failpoints.reach("after_charge")
        if run.pool is not None:
            run.pool.settled(r.key for r in records)
        if changed:
            wh.write_parquet(trials_table(stored), rows)
        if any(r.error_type == ProviderSignal.CEILING for r in records):  # the proxy refused a call past the pool
            lifecycle.reach_ceiling(wh, job_id, "a model call would have passed the Job's Quote")
        if run.stopping is not None:  # recomputed as Trials are stored, after their charges
            stopping.update(wh, job_id, run.stopping)
        if on_trials_done is not None:
            on_trials_done(records)
        if folders:
            harbor_job.write(run)

    def keep_going() -> bool:
        if run.pool is not None:
            run.pool.refresh()  # other cells' charges, and what `amber job continue` adds
        return lifecycle.is_running(wh, job_id)

    def may_start() -> bool:
        """Whether another Trial may start: the Job runs, and has not decided its comparisons."""
        return keep_going() and (run.stopping is None or stopping.recorded(wh, job_id) is None)

    folders = not agent_spec(run.cell.agent).static  # a static cell's Trials have no folders
    if not folders:
        output = run_static_cell(run, on_batch=finished, keep_going=may_start)
    else:
        harbor_job.write(run)
        output = run_cell(run, on_trial_done=lambda record: finished([record]), keep_going=keep_going,
                          may_start=may_start)
        harbor_job.write(run, finished=True)
    order = {(t.name, a): i for i, (t, a) in enumerate(replace(run, done=frozenset()).todo())}
    every = sorted(kept + output.records, key=lambda r: order.get((r.task_name, r.attempt), len(order)))
    wh.write_parquet(trials_table(every), rows)  # in the order they were asked for; even none
    write_transcripts(wh, run, output.calls)
    wh.store.put_folder(records.run_dir(wh, job_id, cell_key))  # its Trial folders, for other machines' reports
    return output.records


def store_results(wh: Warehouse, cell_key: str, job_id: str | None) -> engine.Scores:
    """Score every cell of the cell's Benchmark Version and compare them, then mark the Job's cell done (which
    completes the Job after its last cell). The scores of all the version's cells come back, for display."""
    try:
        version = records.version_of_cell(wh, cell_key)
        scores = store.write_version(wh, version, records.cells_of_version(wh, version))
    except BaseException as exc:
        if job_id is not None:
            _failed(wh, job_id, cell_key, exc)
        raise
    if job_id is not None:
        lifecycle.end_cell(wh, job_id, cell_key, *records.cell_verdict(wh, job_id, cell_key))
    return scores



def run_cell_of_job(wh: Warehouse, job_id: str, cell_key: str,
                    on_trials_done: Callable[[list[TrialRecord]], None] | None = None,
                    prices: Prices = PRICES) -> list[TrialRecord]:
    """What a cell run does, in this process: the Trials, then the results."""
    ran = run_trials(wh, job_id, cell_key, on_trials_done, prices)
    store_results(wh, cell_key, job_id)
    return ran


def _failed(wh: Warehouse, job_id: str, cell_key: str, exc: BaseException) -> None:
    lifecycle.end_cell(wh, job_id, cell_key, "failed", str(exc).splitlines()[0][:300] if str(exc) else None)


def write_transcripts(wh: Warehouse, run: CellRun, calls: list[TranscriptCall]) -> None:
    """The cell run's model calls, one file per day they were made (so the 90-day expiry drops whole days)."""
    by_day: dict[date, list[dict]] = defaultdict(list)
    for t in calls:
        c = t.call
        by_day[c.started_at.date()].append({
            "workspace": run.workspace, "job_id": run.job_id, "cell_key": run.cell.key, "trial_key": t.trial_key,
            "retry": t.retry, "seq": c.seq, "wire": c.wire, "started_at": c.started_at,
            "duration_ms": c.duration_ms, "status": c.status, "streamed": c.streamed, "request": c.request,
            "response": c.response, "input_tokens": c.usage.input_tokens,
            "cached_input_tokens": c.usage.cached_input_tokens, "output_tokens": c.usage.output_tokens,
            "served_by": c.served_by, "signal": c.signal})
    for day, rows in by_day.items():
        wh.write_parquet(pa.Table.from_pylist(rows, schema=TRANSCRIPT_SCHEMA),
                         wh.transcripts_file(day, run.cell.file_id, run.job_id))
