"""A file in the warehouse that Amber did not write is left out of every reader, never a crash or extra rows.

Only Amber writes under the warehouse, but a file dropped there by hand, a
damaged copy or a column of another type must not break scoring, reports or
`amber sql` for everyone whose Trials share its folder (issue 12, finding 4).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import cli

from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.scoring import store
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

CELL = Cell("b" * 64, "oracle", "spec", NO_MODEL)


def trial(task: str, reward: float) -> TrialRecord:
    now = datetime.now(UTC)
    return TrialRecord(workspace="default", job_id="job-1", cell_key=CELL.key, benchmark_version_id="b" * 64,
                       task_name=task, attempt=1, trial_name=f"{task}__1", agent="oracle", agent_version="v",
                       model_configuration=NO_MODEL, outcome="scored", reward=reward, errored=False, retries=0,
                       error_type=None, error_message=None, input_tokens=0, output_tokens=0, cost_usd=0.0,
                       started_at=now, finished_at=now, duration_sec=1.0, image_id=None, trial_dir="")


def test_foreign_files_in_a_cell_folder_are_left_out(warehouse: Warehouse, caplog: pytest.LogCaptureFixture) -> None:
    real = warehouse.trials_file(CELL.file_id, "job-1")
    warehouse.write_parquet(trials_table([trial("a", 1.0), trial("b", 0.0)]), real)
    folder = real.parent
    # Another type for a column, a file with too few columns, and a file that is not Parquet at all.
    pq.write_table(pa.table({"workspace": ["default"], "job_id": ["job-1"], "cell_key": [CELL.key],
                             "reward": ["high"]}), folder / "typed.parquet")
    pq.write_table(pa.table({"workspace": ["default"], "reward": [1.0]}), folder / "thin.parquet")
    (folder / "junk.parquet").write_bytes(b"not parquet at all")

    with caplog.at_level(logging.WARNING):
        assert [p for p, _, _ in warehouse.trial_files()] == [real]
        [cell] = store.write_cell(warehouse, CELL.key).cells
    assert (cell.n_trials, float(cell.mean)) == (2, 0.5)
    for name in ("typed", "thin", "junk"):  # each named, so an operator can move it away
        assert f"left out {folder / name}.parquet" in caplog.text
    ok = cli("sql", "select count(*) as n, avg(reward) as mean from trials")
    assert ok.exit_code == 0, ok.output
    assert "│ 2 " in ok.stdout and "0.5" in ok.stdout, ok.stdout


def test_every_file_is_read_when_all_fit(warehouse: Warehouse) -> None:
    paths = [warehouse.trials_file(CELL.file_id, f"job-{i}") for i in range(3)]
    for i, path in enumerate(paths):
        warehouse.write_parquet(trials_table([trial(f"t{i}", 1.0)]), path)
    assert [p for p, _, _ in warehouse.trial_files()] == sorted(paths)
    assert store.write_cell(warehouse, CELL.key).cells[0].n_trials == 3
