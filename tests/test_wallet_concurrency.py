"""Tests of the Wallet's promises under retries, racing processes and a crashed run.

Charges are keyed by the Trial attempt, so a retried write, a killed run that is run again, or two
processes racing write a charge once; reservations are checked and written inside the catalog's
exclusive lock, so the available amount never goes below zero. Everything is real: separate OS
processes on one catalog, and a cell run in Docker killed with SIGKILL. Nothing is mocked.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import funded, race, submit
from servers import postgres

from amber_pipeline.accounts.identity import Actor, local_user
from amber_pipeline.cells import cell_file_id
from amber_pipeline.jobs import cell_run as pipeline
from amber_pipeline.jobs.records import Job, cells_of, get_job
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import MICRO, usd
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.sandbox.container import SANDBOX_LABEL
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord

DEMO_BENCH = PROJECT_ROOT / "examples" / "demo-bench"
WORKSPACE = "race"


def ledger_rows(wh: Warehouse, workspace: str) -> list[tuple]:
    """(seq, kind, amount, quote_id, trial_key, entry_key) of every entry, in the order they were written."""
    with wh.read() as con:
        return con.execute("select seq, kind, amount, quote_id, trial_key, entry_key from ledger "
                           "where workspace = ? order by seq", [workspace]).fetchall()


# ---- 1. several OS processes reserve and charge one Wallet ----------------------------------------------------

WALLET_WORKER = textwrap.dedent("""
    import json, sys, time
    from datetime import UTC, datetime
    from decimal import Decimal
    from amber_pipeline.money import wallet
    from amber_pipeline.errors import AmberError
    from amber_pipeline.paths import AmberPaths
    from amber_pipeline.warehouse.catalog import Warehouse

    me, workspace, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    wh = Warehouse(AmberPaths.from_env())
    print("ready", flush=True)
    sys.stdin.readline()  # wait for "go", so all workers contend at once
    AMOUNTS = [Decimal("0.05"), Decimal("0.10"), Decimal("0.20"), Decimal("0.35")]
    out = {"attempted": [], "reserved": [], "refused": 0, "charges": [], "released": [], "retry_nonzero": 0}
    n = 0
    start = time.monotonic()
    # Run for the time given, and on until refused at least once: the money is finite, so that comes.
    while time.monotonic() < start + seconds or (not out["refused"] and time.monotonic() < start + 30):
        n += 1
        window = int(time.time() / 2)  # workers in the same two seconds collide on purpose
        if n == 1:  # every worker's first Quote is the same one, reserved by all at once
            quote_id, amount = "quote-shared-go", Decimal("0.05")
        elif n % 2 == 0:
            quote_id, amount = f"quote-shared-{window}", Decimal("0.02")
        else:
            quote_id, amount = f"quote-w{me}-{n}", AMOUNTS[(me + n) % len(AMOUNTS)]
        job_id = f"job-{quote_id}"
        out["attempted"].append(quote_id)
        try:
            with wh.write(workspace) as con:
                wallet.reserve(con, workspace, quote_id, job_id, amount, datetime.now(UTC))
        except AmberError as e:
            if "available" not in str(e):
                raise
            out["refused"] += 1
            continue
        out["reserved"].append(quote_id)
        keys = [f"w{me}/{n}/1", f"w{me}/{n}/2", f"shared/{window}", f"shared/{window}/{n % 2}"]
        costs = [Decimal("0.012345"), Decimal("0.000001"), Decimal("0.031"),
                 Decimal("0.5") if n % 3 == 0 else Decimal("0.004321")]  # 0.5: past any Quote, the ceiling
        for pair in (0, 2):  # two transactions of two charges each
            with wh.write(workspace) as con:
                for key, cost in zip(keys[pair:pair + 2], costs[pair:pair + 2]):
                    got = wallet.charge(con, workspace, quote_id, job_id, key, cost)
                    out["charges"].append([key, quote_id, str(got.amount)])
        with wh.write(workspace) as con:  # a retried write of an attempt charged above
            again = wallet.charge(con, workspace, quote_id, job_id, keys[0], costs[0])
        out["retry_nonzero"] += again.amount != 0
        with wh.write(workspace) as con:
            left = wallet.release(con, workspace, quote_id, job_id, "done")
        out["released"].append([quote_id, str(left)])
    print(json.dumps(out), flush=True)
""")


def replay(rows: list[tuple]) -> tuple[Decimal, Decimal, list[str]]:
    """Replay the ledger in seq order; (balance, reserved, broken rules) at the end."""
    balance = reserved = Decimal(0)
    per_quote: dict[str, Decimal] = defaultdict(Decimal)
    broken = []
    for seq, kind, amount, quote_id, _, _ in rows:
        if kind == "credit":
            balance += amount
        elif kind == "reservation":
            reserved += amount
            per_quote[quote_id] += amount
        elif kind == "charge":
            balance -= amount
            reserved -= amount
            per_quote[quote_id] -= amount
        elif kind == "refund":
            reserved -= amount
            per_quote[quote_id] -= amount
        if balance - reserved < 0:
            broken.append(f"seq {seq}: available {balance - reserved} after a {kind} of {amount}")
        if quote_id is not None and per_quote[quote_id] < 0:
            broken.append(f"seq {seq}: Quote {quote_id} went {per_quote[quote_id]} below its reservation")
    return balance, reserved, broken


@pytest.mark.usefixtures("both_catalogs")  # on DuckDB and on PostgreSQL
def test_racing_processes_never_overdraw_and_charge_each_attempt_once(warehouse: Warehouse) -> None:
    funded(warehouse, WORKSPACE, "0.30")  # small: the workers run out and must be refused
    topped_up = []

    def top_up() -> None:  # staff add small Credits while the workers spend: the Wallet hovers near empty
        actor = Actor(local_user(), WORKSPACE)
        for _ in range(5):
            time.sleep(0.5)
            topped_up.append(wallet.add_credit(warehouse, actor, WORKSPACE, "0.05", "top-up during the race"))

    reports = race(WALLET_WORKER, [[str(i), WORKSPACE, "5"] for i in range(4)], during=top_up)

    # The race really raced: refusals, Quotes reserved by two workers, keys charged by two workers.
    assert all(r["refused"] for r in reports), reports
    assert all(r["reserved"] for r in reports), "every worker reserved at least once"
    reserved_by = Counter(q for r in reports for q in set(r["reserved"]))
    assert any(n > 1 for q, n in reserved_by.items() if q.startswith("quote-shared-")), reserved_by
    tried_by = Counter(key for r in reports for key, _, _ in r["charges"])
    collided = {key for key, n in tried_by.items() if n > 1}
    assert collided, "no Trial key was charged by two workers"
    assert all(r["retry_nonzero"] == 0 for r in reports), "a retried charge was charged again"

    rows = ledger_rows(warehouse, WORKSPACE)
    assert all(isinstance(amount, Decimal) and amount == amount.quantize(MICRO) for _, _, amount, *_ in rows)
    entry_keys = [r[5] for r in rows]
    assert len(entry_keys) == len(set(entry_keys))

    # Every charge key is in the ledger at most once, and exactly what the one worker that wrote it was told.
    charges = [r for r in rows if r[1] == "charge"]
    charged = Counter(r[4] for r in charges)
    assert all(n == 1 for n in charged.values()), [k for k, n in charged.items() if n > 1]
    reported: dict[str, list[Decimal]] = defaultdict(list)
    for r in reports:
        for key, _, amount in r["charges"]:
            if Decimal(amount):
                reported[key].append(Decimal(amount))
    assert all(len(amounts) == 1 for amounts in reported.values()), {k: v for k, v in reported.items() if len(v) > 1}
    assert {r[4]: r[2] for r in charges} == {k: v[0] for k, v in reported.items()}
    assert any(key in charged for key in collided)
    assert sum(r[2] for r in charges) == sum(v[0] for v in reported.values())

    # Replayed in write order, the available amount never went below zero and ends where the Wallet says.
    balance, reserved, broken = replay(rows)
    assert not broken, broken[:5]
    with warehouse.read() as con:
        final = wallet.state(con, WORKSPACE)
        quote_ids = [q for (q,) in con.execute("select distinct quote_id from ledger where workspace = ? "
                                                "and quote_id is not null", [WORKSPACE]).fetchall()]
        totals = {q: wallet.quote_totals(con, q) for q in quote_ids}
    assert (final.balance, final.reserved, final.available) == (balance, reserved, balance - reserved)
    assert final.available >= 0
    assert final.reserved == 0  # every Quote was released
    credits = sum(r[2] for r in rows if r[1] == "credit")
    assert credits == Decimal("0.30") + sum(topped_up)
    assert final.balance == credits - sum(r[2] for r in charges)

    # Each Quote: reserved once, and reserved == charged + refunded; the refunds are what release returned.
    reservations = Counter(r[3] for r in rows if r[1] == "reservation")
    assert all(n == 1 for n in reservations.values())
    assert set(totals) == set(reservations)
    for q, (res, chg, ref) in totals.items():
        assert res == chg + ref, (q, res, chg, ref)
    released = sum(Decimal(left) for r in reports for _, left in r["released"])
    assert released == sum(r[2] for r in rows if r[1] == "refund")


# ---- 2. a retried charge ----------------------------------------------------------------------------------------

@pytest.mark.usefixtures("both_catalogs")  # on DuckDB and on PostgreSQL
def test_a_retried_charge_writes_one_entry(warehouse: Warehouse) -> None:
    funded(warehouse, WORKSPACE, "10")
    now = datetime.now(UTC)
    with warehouse.write() as con:
        wallet.reserve(con, WORKSPACE, "quote-r", "job-r", Decimal("1.00"), now)
        first = wallet.charge(con, WORKSPACE, "quote-r", "job-r", "job-r/cell/task/1", Decimal("0.123456"))
        same_transaction = wallet.charge(con, WORKSPACE, "quote-r", "job-r", "job-r/cell/task/1", Decimal("0.123456"))
    with warehouse.write() as con:  # a retried write, as a restarted run makes it (another cost measured)
        later = wallet.charge(con, WORKSPACE, "quote-r", "job-r", "job-r/cell/task/1", Decimal("0.2"))
        other = wallet.charge(con, WORKSPACE, "quote-r", "job-r", "job-r/cell/task/2", Decimal("0.2"))
    assert first.amount == Decimal("0.123456") and not first.ceiling_reached
    assert same_transaction.amount == 0 and later.amount == 0
    assert other.amount == Decimal("0.2")

    with warehouse.write() as con:
        refunded = wallet.release(con, WORKSPACE, "quote-r", "job-r", "done")
    with warehouse.write() as con:
        assert wallet.release(con, WORKSPACE, "quote-r", "job-r", "done again") == 0
    assert refunded == Decimal("1.00") - Decimal("0.323456")

    rows = ledger_rows(warehouse, WORKSPACE)
    assert [r[5] for r in rows if r[1] == "charge"] == ["charge:job-r/cell/task/1", "charge:job-r/cell/task/2"]
    assert [r[2] for r in rows if r[1] == "charge"] == [Decimal("0.123456"), Decimal("0.2")]
    assert [r[2] for r in rows if r[1] == "refund"] == [refunded]
    with warehouse.read() as con:
        assert wallet.quote_totals(con, "quote-r") == (Decimal("1.00"), Decimal("0.323456"), refunded)
        state = wallet.state(con, WORKSPACE)
    assert (state.balance, state.reserved, state.available) == (Decimal("9.676544"), 0, Decimal("9.676544"))




@pytest.mark.usefixtures("both_catalogs")  # on DuckDB and on PostgreSQL
def test_a_batch_of_charges_stops_at_the_quote_and_charges_each_key_once(warehouse: Warehouse) -> None:
    """The static fast path charges Trials in batches: the same rules as one by one, in order."""
    funded(warehouse, WORKSPACE, "10")
    with warehouse.write() as con:
        wallet.reserve(con, WORKSPACE, "quote-b", "job-b", Decimal("1.00"), datetime.now(UTC))
        wallet.charge(con, WORKSPACE, "quote-b", "job-b", "t/0", Decimal("0.10"))  # charged by an earlier run
        got = wallet.charge_many(con, WORKSPACE, "quote-b", "job-b", [
            ("t/0", Decimal("0.50")), ("t/1", Decimal("0.40")), ("t/1", Decimal("0.40")), ("t/2", Decimal(0)),
            ("t/3", Decimal("0.45")), ("t/4", Decimal("0.30"))])
    assert [(c.amount, c.ceiling_reached, c.earlier) for c in got] == [
        (Decimal(0), False, Decimal("0.10")),  # never twice: the earlier charge stands
        (Decimal("0.40"), False, None),
        (Decimal(0), False, Decimal("0.40")),  # the same key twice in one batch: once
        (Decimal(0), False, None),  # nothing spent, nothing written
        (Decimal("0.45"), False, None),
        (Decimal("0.05"), True, None),  # only what is left of the Quote, and the ceiling is reached
    ]
    charges = [r for r in ledger_rows(warehouse, WORKSPACE) if r[1] == "charge"]
    assert sum(r[2] for r in charges) == Decimal("1.00")
    assert sorted(r[5] for r in charges) == ["charge:t/0", "charge:t/1", "charge:t/3", "charge:t/4"]

# ---- 3. a cell run killed with SIGKILL, then run again ---------------------------------------------------------

CRASH_TASKS = ("count-log-errors", "fix-off-by-one", "ini-port-change")  # run in this (sorted) order
SLOW_VERIFIER_SEC = 6  # the last two Trials verify this long, so they are surely in flight at the kill

CELL_WORKER = textwrap.dedent("""
    import sys
    from amber_pipeline.jobs import cell_run as pipeline
    from amber_pipeline.paths import AmberPaths
    from amber_pipeline.warehouse.catalog import Warehouse

    pipeline.run_cell_of_job(Warehouse(AmberPaths.from_env()), sys.argv[1], sys.argv[2])
""")


def sandboxes(task_names: list[str], running: bool = False) -> dict[str, str]:
    """{container id: Task name} of the Amber sandboxes (any state, or running only) of these Tasks' Trials."""
    out = subprocess.run(["docker", "ps", *([] if running else ["-a"]), "--filter", f"label={SANDBOX_LABEL}",
                          "--format", f'{{{{.ID}}}} {{{{.Label "{SANDBOX_LABEL}"}}}}'],
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        cid, _, session = line.partition(" ")
        for name in task_names:
            if session.startswith(f"{name}__"):
                found[cid] = name
    return found


@dataclass(frozen=True)
class CrashRun:
    task_names: list[str]
    job: Job
    charged_before_kill: list[str]
    cell_status_after_kill: str
    orphans_after_kill: list[str]
    records: list[TrialRecord]
    charges: list[tuple[str, Decimal]]
    job_status: str
    cell_statuses: list[str]
    totals: tuple[Decimal, Decimal, Decimal]
    parquet_tasks: list[str]
    left_after_restart: list[str]


@pytest.fixture(scope="module", params=postgres.CATALOGS)
def crash(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CrashRun]:
    tmp = tmp_path_factory.mktemp("crash")
    suffix = uuid.uuid4().hex[:6]  # Task names, and so sandbox labels, of this test alone
    names = [f"{task}-{suffix}" for task in CRASH_TASKS]
    for task, name in zip(CRASH_TASKS, names, strict=True):
        shutil.copytree(DEMO_BENCH / task, tmp / "bench" / name)
        if task != CRASH_TASKS[0]:
            verifier = tmp / "bench" / name / "tests" / "test.sh"
            shebang, rest = verifier.read_text().split("\n", 1)
            verifier.write_text(f"{shebang}\nsleep {SLOW_VERIFIER_SEC}\n{rest}")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AMBER_HOME", str(tmp / "amber"))
            mp.setenv("AMBER_CONFIG", str(tmp / "amber-config.toml"))
            postgres.use_catalog(request.param, request, mp)
            wh = Warehouse(AmberPaths.from_env())
            job = submit(wh, str(tmp / "bench"), "nop", [], 1)
            [cell] = cells_of(wh, job.id)
            yield _crash_and_restart(wh, tmp, names, job, cell.cell_key)
    finally:
        leftovers = list(sandboxes(names))
        if leftovers:
            subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True)


def _charged(wh: Warehouse, job_id: str) -> list[tuple[str, Decimal]]:
    with wh.read() as con:
        return con.execute("select trial_key, amount from ledger where job_id = ? and kind = 'charge' order by seq",
                           [job_id]).fetchall()


def _in_flight(wh: Warehouse, job_id: str, names: list[str]) -> bool:
    """At least one Trial charged, and the sandbox of a Trial not charged yet running."""
    charged = {key.split("/")[2] for key, _ in _charged(wh, job_id)}
    return bool(charged) and bool(set(sandboxes(names, running=True).values()) - charged)


def _crash_and_restart(wh: Warehouse, tmp: Path, names: list[str], job: Job, cell_key: str) -> CrashRun:
    log = tmp / "killed-run.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", CELL_WORKER, job.id, cell_key], cwd=PROJECT_ROOT,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # Kill it once a Trial is charged while the sandbox of a Trial not yet charged runs: mid-Trial.
        deadline = time.monotonic() + 120
        while not _in_flight(wh, job.id, names):
            assert proc.poll() is None, f"the cell run ended before it could be killed:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no charge within 120 s:\n{log.read_text()[-3000:]}"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    charged_before = [key for key, _ in _charged(wh, job.id)]
    [killed_cell] = cells_of(wh, job.id)
    time.sleep(1)  # nothing is left to remove them, but give a removal already under way its moment
    orphans = list(sandboxes(names))

    records = pipeline.run_cell_of_job(wh, job.id, cell_key)

    with wh.read() as con:
        quote_id = con.execute("select quote_id from jobs where id = ?", [job.id]).fetchone()[0]
        totals = wallet.quote_totals(con, quote_id)
    table = pq.read_table(wh.trials_file(cell_file_id(cell_key), job.id))
    # A container being removed by force can outlive the call that removed it by a moment.
    left = list(sandboxes(names))
    for _ in range(20):
        if not left:
            break
        time.sleep(0.25)
        left = list(sandboxes(names))
    return CrashRun(
        task_names=names, job=job, charged_before_kill=charged_before, cell_status_after_kill=killed_cell.status,
        orphans_after_kill=orphans, records=records, charges=_charged(wh, job.id),
        job_status=get_job(wh, job.id, None).status,
        cell_statuses=[c.status for c in cells_of(wh, job.id)], totals=totals,
        parquet_tasks=sorted(table.column("task_name").to_pylist()), left_after_restart=left)


@pytest.mark.slow
@pytest.mark.docker
def test_a_killed_cell_run_run_again_charges_each_trial_once(crash: CrashRun) -> None:
    assert crash.charged_before_kill, "the run was killed after its first charge"
    assert crash.cell_status_after_kill == "running"  # nobody marked it: the process died
    assert crash.orphans_after_kill, "the kill hit while a sandbox was up"

    # The restarted run marked the cell running again, kept the Trials stored before the kill, ran the others
    # (the one in flight again), and ended the Job.
    kept = {key.split("/")[2] for key in crash.charged_before_kill}
    assert kept and {r.task_name for r in crash.records} == set(crash.task_names) - kept
    assert all(r.outcome == "scored" and r.attempt == 1 for r in crash.records), crash.records
    assert crash.cell_statuses == ["done"]
    assert crash.job_status == "completed"

    # One charge per Trial attempt: the ones charged before the kill were not charged again.
    keys = [key for key, _ in crash.charges]
    assert len(keys) == len(set(keys)), keys
    assert sorted(keys) == sorted([r.key for r in crash.records] + crash.charged_before_kill)
    assert set(crash.charged_before_kill) <= set(keys)
    reserved, charged, refunded = crash.totals
    assert charged == sum(amount for _, amount in crash.charges) > 0
    assert reserved == charged + refunded
    assert crash.parquet_tasks == sorted(crash.task_names)
    # Each stored Trial row shows what the ledger charged for it, also for Trials charged before the kill.
    charged_by_key = dict(crash.charges)
    assert all(usd(r.cost_usd) == charged_by_key[r.key] for r in crash.records), crash.records


@pytest.mark.docker
def test_a_killed_cell_run_run_again_leaves_no_sandbox(crash: CrashRun) -> None:
    assert crash.orphans_after_kill  # the precondition is asserted (not xfailed) in the test above
    assert crash.left_after_restart == [], crash.left_after_restart

