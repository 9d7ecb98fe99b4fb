"""One cell run: the Job's Trials of one cell, charged and stored.

The run writes Trial rows (one Parquet file per cell and Job) and ledger
entries, nothing else: the cell's Rewards and score are the scoring engine's
(`scoring.store.write_cell`), evidence and failure causes are derived when read.
"""

from __future__ import annotations

from collections.abc import Callable

from amber_pipeline.jobs import lifecycle
from amber_pipeline.jobs.outcomes import Kind
from amber_pipeline.jobs.trial_runner import run_cell
from amber_pipeline.money.prices import PRICES, Prices
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table


def run_trials(wh: Warehouse, job_id: str, cell_key: str,
               on_trial_done: Callable[[TrialRecord], None] | None = None,
               prices: Prices = PRICES) -> list[TrialRecord]:
    """Run the Job's Trials of one cell and store them; the cell is marked done or failed."""
    run = lifecycle.open_cell_run(wh, job_id, cell_key, prices)
    if not lifecycle.start_cell(wh, job_id, cell_key):  # cancelled or at its ceiling before this run began
        return []

    def finished(record: TrialRecord) -> None:
        if record.outcome == Kind.SCORED:  # Errored and cancelled Trials are not charged
            charge = lifecycle.charge_trial(wh, job_id, record.key, record.cost_usd)
            if charge.earlier is not None:  # a restarted run: the row shows what the ledger charged
                record.cost_usd = float(charge.earlier)
        if on_trial_done is not None:
            on_trial_done(record)

    try:
        records = run_cell(run, on_trial_done=finished, keep_going=lambda: lifecycle.is_running(wh, job_id))
        wh.write_parquet(trials_table(records), wh.trials_file(run.cell.file_id, job_id))
    except BaseException as exc:
        lifecycle.end_cell(wh, job_id, cell_key, "failed", str(exc).splitlines()[0][:300] if str(exc) else None)
        raise
    lifecycle.end_cell(wh, job_id, cell_key, "done")
    return records
