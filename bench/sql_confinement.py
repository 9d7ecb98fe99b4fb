"""SQL confinement: what `amber sql` pays for running in a DuckDB of its own with copies of the Workspace's rows.

Writes (outside the timing) synthetic Trial rows for two Workspaces (the
acting one and another, half and half), one Parquet file per cell and Job,
plus a ledger of Credits. Then times, in this process, the same query two
ways, each over a fresh connection: the confined engine of `amber sql`
(`warehouse.confined.run`: load the Workspace's rows of the views the query
names, lock the connection down, run) and the attached views Amber's own
readers use (`Warehouse.query(workspace)`), which are no boundary. Median of
5 each; the ratio is confined over attached. `--smoke` is a small run for the
test suite: 10,000 Trial rows, 200 ledger entries, median of 3.

    .venv/bin/python bench/sql_confinement.py [--trials 200000] [--ledger 2000] [--repeats 5] [--smoke] [--keep]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime
from decimal import Decimal

import numpy as np
from synthetic import Trials, scratch_home, trial_table

from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.money import wallet
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse import confined
from amber_pipeline.warehouse.catalog import Warehouse

REPEATS = 5
TRIALS_PER_FILE = 1_000
QUERIES = {
    "trials": "select model_configuration, count(*), avg(reward), sum(cost_usd) from trials group by all",
    "ledger": "select kind, sum(amount) from ledger group by kind",
}


def write_trials(wh: Warehouse, total: int) -> None:
    rng = np.random.default_rng(12)
    for i in range(total // TRIALS_PER_FILE):
        workspace = "acting" if i % 2 == 0 else "other"
        cell = Cell("b" * 64, "terminus-2", "spec", f"model-{i % 4}@{'c' * 12}" if i % 4 else NO_MODEL)
        n = TRIALS_PER_FILE
        trials = Trials(task=rng.integers(0, 500, n), attempt=np.ones(n, np.int64), reward=rng.random(n),
                        errored=rng.random(n) < 0.05, input_tokens=rng.integers(1, 10_000, n),
                        output_tokens=rng.integers(1, 2_000, n), cost_usd=rng.random(n) / 100,
                        duration_sec=rng.random(n) * 100)
        job_id = f"job-{i:06d}"
        wh.write_parquet(trial_table(cell, workspace, job_id, "b" * 64, trials, datetime(2026, 1, 1, tzinfo=UTC),
                                     "AgentTimeoutError"), wh.trials_file(cell.file_id, job_id))


def write_ledger(wh: Warehouse, entries: int) -> None:
    with wh.write() as con:
        for name in ("acting", "other"):
            con.execute("insert into workspaces (name, created_by) values (?, 'bench')", [name])
        for i in range(entries):
            wallet.credit(con, "acting" if i % 2 == 0 else "other", Decimal("1.5"), "bench", f"credit:{i}")


def timed(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _rounded(rows: list) -> list:
    return sorted(tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200_000)
    parser.add_argument("--ledger", type=int, default=2_000, help="ledger entries (default 2,000)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timings of each way, their median (default 5)")
    parser.add_argument("--smoke", action="store_true", help="10,000 Trials, 200 ledger entries, median of 3")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.trials, args.ledger, args.repeats = 10_000, 200, 3
    with scratch_home("amber-bench-sql-", args.keep):
        wh = Warehouse(AmberPaths.from_env())
        write_trials(wh, args.trials)
        write_ledger(wh, args.ledger)
        print(f"{args.trials:,} Trial rows in {args.trials // TRIALS_PER_FILE} files, {args.ledger:,} ledger entries; "
              f"half of each the acting Workspace's")
        for name, query in QUERIES.items():
            ours = confined.run(wh, "acting", query)

            def attached(query: str = query) -> list:
                with wh.query("acting") as con:
                    return con.execute(query).fetchall()

            assert _rounded(ours.rows) == _rounded(attached()), name  # the same answer (sums in another order)
            boundary = timed(lambda query=query: confined.run(wh, "acting", query), args.repeats)
            baseline = timed(attached, args.repeats)
            print(f"{name}: confined {boundary:.3f} s, attached views {baseline:.3f} s")
            print(f"FIGURE sql_confined_{name}_seconds {boundary:.3f} s")
            print(f"FIGURE sql_confined_{name}_ratio {boundary / baseline:.2f} x")


if __name__ == "__main__":
    main()
