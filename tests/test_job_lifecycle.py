"""The life of a Job and its money: states, Quotes, expiry, estimates, cancel, ceiling, and the CLI.

Everything is real: a DuckDB warehouse in a temporary AMBER_HOME, Docker sandboxes for the Trials,
a Dagster test instance for the expiry schedule, and the `amber` CLI in this process (in a process of
its own where the machine's time zone matters). Time is injected (`now=`) where the rule is about time,
and prices (`prices=`) where a Trial must cost more than its Quote; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import dagster as dg
import pytest
from helpers import cli, funded, ok, refusal, request

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import cell_run as pipeline
from amber_pipeline.jobs import lifecycle as jobs
from amber_pipeline.jobs import quotes
from amber_pipeline.jobs.records import FINAL, cells_of, get_job, list_jobs, trials_finished
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import PRICES, Prices, show, usd
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.sandbox import docker_engine
from amber_pipeline.sandbox.container import SANDBOX_LABEL
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord
from assets.resources import WarehouseResource

# the money suite runs on DuckDB and on PostgreSQL; its commands on the embedded default and against `amber serve`
pytestmark = pytest.mark.usefixtures("both_catalogs", "cli_mode")

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
STATES = ("quoted", "running", "completed", "cancelled", "ceiling_reached", "failed")
LEGAL = {("quoted", "running"), ("quoted", "cancelled"), ("running", "completed"), ("running", "cancelled"),
         ("running", "ceiling_reached"), ("running", "failed"),
         ("ceiling_reached", "running"), ("cancelled", "running")}  # the last two: `amber job continue`
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
NEW_YORK = ZoneInfo("America/New_York")


@pytest.fixture
def wh(warehouse: Warehouse) -> Warehouse:
    return warehouse


def bench(tmp_path: Path, name: str, tasks: dict[str, str], sleeps: dict[str, int] | None = None) -> Path:
    """A Benchmark folder of copied demo Tasks ({new name: demo Task}); a sleep delays a Task's oracle."""
    root = tmp_path / name
    for new, demo in tasks.items():
        shutil.copytree(DEMO / demo, root / new)
        seconds = (sleeps or {}).get(new)
        if seconds:
            solve = root / new / "solution" / "solve.sh"
            lines = solve.read_text().splitlines()
            solve.write_text("\n".join([lines[0], f"sleep {seconds}", *lines[1:]]) + "\n")
            toml = root / new / "task.toml"
            toml.write_text(toml.read_text().replace("[agent]\ntimeout_sec = 120.0", "[agent]\ntimeout_sec = 300.0"))
            assert "timeout_sec = 300.0" in toml.read_text()
    return root


def one_sentence(message: str, *fragments: str) -> None:
    assert "\n" not in message and message.endswith("."), message
    assert len(re.findall(r"[.!?](?:\s|$)", message.replace("`amber job quote`", ""))) == 1, message
    for fragment in fragments:
        assert fragment in message, message


def totals(wh: Warehouse, quote_id: str) -> tuple[Decimal, Decimal, Decimal]:
    with wh.read() as con:
        return wallet.quote_totals(con, quote_id)


def spending(wh: Warehouse, job_id: str, workspace: str = DEFAULT_WORKSPACE) -> dict:
    with wh.query(workspace) as con:
        cur = con.execute("select * from job_spending where job_id = ?", [job_id])
        columns = [d[0] for d in cur.description]
        row = cur.fetchone()
    assert row is not None
    return dict(zip(columns, row, strict=True))


def ledger(wh: Warehouse, workspace: str = DEFAULT_WORKSPACE) -> list[wallet.Entry]:
    with wh.read() as con:
        return wallet.entries(con, workspace)


def state(wh: Warehouse, workspace: str = DEFAULT_WORKSPACE) -> wallet.WalletState:
    with wh.read() as con:
        return wallet.state(con, workspace)


# ---- 1. states ---------------------------------------------------------------------------------------------

def quote(wh: Warehouse, source: Path | str, trials: int = 1, workspace: str = DEFAULT_WORKSPACE,
          now: datetime | None = None, agent: str = "oracle", bounds: bool = False) -> quotes.Quote:
    """A Quote of the local (staff) user, as `amber job quote` makes it."""
    return jobs.quote(wh, workspace, local_user(), request(str(source), agent, [], trials, bounds), now=now)


def job_in(wh: Warehouse, source: Path, status: str) -> str:
    """A Job brought to a state through legal transitions only."""
    job_id = quote(wh, source).job_id
    path = {"quoted": [], "running": ["running"], "cancelled": ["cancelled"]}.get(status, ["running", status])
    for step in path:
        with wh.write() as con:
            jobs.transition(con, job_id, step)
    assert get_job(wh, job_id, None).status == status
    return job_id


def test_every_transition_over_the_six_states(tmp_path: Path, wh: Warehouse) -> None:
    funded(wh)
    source = bench(tmp_path, "one", {"ini-port-change": "ini-port-change"})
    assert set(jobs.TRANSITIONS) | set(FINAL) == set(STATES)
    in_state = {"quoted": job_in(wh, source, "quoted")}
    for a, b in sorted(LEGAL):
        job_id = job_in(wh, source, a)
        with wh.write() as con:
            jobs.transition(con, job_id, b)
        assert get_job(wh, job_id, None).status == b
        in_state[b] = job_id
    assert set(in_state) == set(STATES)
    for a in STATES:
        job_id = in_state[a]  # a refused move changes nothing, so one Job serves every target
        for b in STATES:
            if (a, b) in LEGAL:
                continue
            with pytest.raises(AmberError) as refused, wh.write() as con:
                jobs.transition(con, job_id, b)
            one_sentence(str(refused.value), f"is {a}", f"cannot become {b}", job_id)
            assert get_job(wh, job_id, None).status == a
    assert {(a, b) for a, tos in jobs.TRANSITIONS.items() for b in tos} == LEGAL


# ---- 2. a short Wallet ---------------------------------------------------------------------------------------

def test_a_quote_is_refused_with_the_amount_missing(tmp_path: Path, wh: Warehouse) -> None:
    source = bench(tmp_path, "two", {"ini-port-change": "ini-port-change", "fix-off-by-one": "fix-off-by-one"})
    funded(wh, "rich", "100")
    needed = quote(wh, source, 10, "rich").amount
    credit = usd(needed / 2)
    assert needed > credit
    funded(wh, "poor", str(credit))
    with pytest.raises(AmberError) as refused:
        quote(wh, source, 10, "poor")
    one_sentence(str(refused.value), f"has {show(credit)} available",
                 f"needs {show(needed)}", f"{show(needed - credit)} is missing")
    assert [e.kind for e in ledger(wh, "poor")] == ["credit"]
    assert list_jobs(wh, "poor") == []
    with wh.read() as con:
        assert con.execute("select count(*) from quotes where workspace = 'poor'").fetchone() == (0,)
    assert state(wh, "poor").available == credit


# ---- 3. expiry -------------------------------------------------------------------------------------------

def test_an_expired_quote_cannot_start_and_its_reservation_is_refunded(tmp_path: Path, wh: Warehouse) -> None:
    funded(wh, amount="1")
    source = bench(tmp_path, "one", {"ini-port-change": "ini-port-change"})
    fresh = quote(wh, source, 2, now=T0)
    assert fresh.expires_at == T0 + quotes.LIFETIME == T0 + timedelta(hours=1)
    assert jobs.start(wh, DEFAULT_WORKSPACE, fresh.id, now=T0 + timedelta(minutes=59)).status == "running"
    late = quote(wh, source, 2, now=T0)
    assert state(wh).reserved == fresh.amount + late.amount
    with pytest.raises(AmberError) as refused:
        jobs.start(wh, DEFAULT_WORKSPACE, late.id, now=T0 + timedelta(minutes=61))
    one_sentence(str(refused.value), f"Quote {late.id} expired", "make a new one")
    job = get_job(wh, late.job_id, DEFAULT_WORKSPACE)
    assert job.status == "cancelled" and job.message == jobs.EXPIRED
    refunds = [e for e in ledger(wh) if e.kind == "refund" and e.quote_id == late.id]
    assert [e.amount for e in refunds] == [late.amount]
    assert totals(wh, late.id) == (late.amount, 0, late.amount)
    assert spending(wh, late.job_id)["settled"] is True
    assert state(wh).available == Decimal(1) - fresh.amount  # the started Job still holds its reservation
    assert get_job(wh, fresh.job_id, None).status == "running"  # a started Job never expires

    entries = len(ledger(wh))
    assert jobs.expire_due(wh, T0 + timedelta(hours=5)) == []
    assert len(ledger(wh)) == entries
    with pytest.raises(AmberError):  # and it stays unstartable
        jobs.start(wh, DEFAULT_WORKSPACE, late.job_id, now=T0 + timedelta(hours=5))
    assert len(ledger(wh)) == entries


def test_the_expiry_schedule_runs_only_when_a_quote_is_due(tmp_path: Path, wh: Warehouse) -> None:
    from assets.schedules import quote_expiry_job, quote_expiry_schedule  # here: assets/ imports all schedules

    funded(wh, amount="1")
    source = bench(tmp_path, "one", {"ini-port-change": "ini-port-change"})
    now = datetime.now(UTC)
    resources = {"warehouse": WarehouseResource()}
    with dg.instance_for_test() as instance:
        def evaluate(at: datetime):
            context = dg.build_schedule_context(instance=instance, scheduled_execution_time=at,
                                                resources=resources)
            return quote_expiry_schedule(context)

        assert isinstance(evaluate(now), dg.SkipReason)
        made = quote(wh, source, now=now - timedelta(minutes=90))
        assert isinstance(evaluate(now - timedelta(minutes=45)), dg.SkipReason)  # not yet an hour old
        run_request = evaluate(now)
        assert isinstance(run_request, dg.RunRequest)
        assert quotes.due(wh, now) == [made.id]
        assert quote_expiry_job.execute_in_process(instance=instance, resources=resources).success
        assert get_job(wh, made.job_id, None).status == "cancelled"
        assert totals(wh, made.id) == (made.amount, 0, made.amount)
        assert state(wh).available == Decimal(1)
        assert isinstance(evaluate(now), dg.SkipReason)


@pytest.mark.docker  # `amber job start` pings the Docker engine before it reads the Quote
def test_the_expiry_sentence_tells_the_time_in_utc(tmp_path: Path, wh: Warehouse, amber_home: Path) -> None:
    """Whatever the machine's time zone, a time labelled UTC is in UTC.

    A process of its own: the time zone of the catalog's timestamps is fixed when a process first opens DuckDB.
    """
    funded(wh, amount="1")
    source = bench(tmp_path, "one", {"ini-port-change": "ini-port-change"})
    made = quote(wh, source, now=datetime.now(UTC) - timedelta(hours=2))
    r = subprocess.run([sys.executable, "-m", "amber_pipeline.cli", "job", "start", made.id], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "TZ": "America/New_York"})
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert r.stderr.startswith("amber: ") and r.stderr.count("\n") == 1, r.stderr
    one_sentence(r.stderr.removeprefix("amber: ").strip(),
                 f"Quote {made.id} expired at {made.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC")
    assert made.expires_at.astimezone(UTC).hour != made.expires_at.astimezone(NEW_YORK).hour


# ---- 4. estimates ------------------------------------------------------------------------------------------

@pytest.mark.docker
def test_a_quote_uses_each_task_s_measured_history(tmp_path: Path, wh: Warehouse) -> None:
    funded(wh)
    source = bench(tmp_path, "two", {"ini-port-change": "ini-port-change", "fix-off-by-one": "fix-off-by-one"})
    first = quote(wh, source)
    [cell] = first.cells
    assert "declared limits" in cell.basis and cell.n_tasks == 2 and cell.trials_per_task == 1
    assert Decimal(cell.total) == Decimal(cell.cost_per_trial) * 2 == first.amount
    jobs.start(wh, DEFAULT_WORKSPACE, first.id)
    records = pipeline.run_cell_of_job(wh, first.job_id, cell.cell_key)
    assert [r.outcome for r in records] == ["scored", "scored"]

    second = quote(wh, source, 3)
    [again] = second.cells
    assert again.cell_key == cell.cell_key
    assert again.basis == ("Environment and Verifier: Task history (2 Tasks); Agent: cell history on the Task "
                           "(2 Tasks)")
    # Each Task at its own measured sandbox time but its image's (oracle calls no model), with headroom, three
    # Trials each: the Task's part (Environment and Verifier) and the Agent's, each 1.4 times what it took.
    per_task = [PRICES.sandbox_cost((r.environment_sec + r.verifier_sec) * 1.4 + r.agent_sec * 1.4)
                for r in records]
    assert all(abs(r.environment_sec + r.agent_sec + r.verifier_sec + r.image_sec - r.duration_sec) < 1e-6
               for r in records)
    assert second.amount == Decimal(again.total) == 3 * sum(per_task)
    assert totals(wh, first.id)[0] == totals(wh, first.id)[1] + totals(wh, first.id)[2]


# ---- 5. cancel while running -----------------------------------------------------------------------------

class Background:
    """pipeline.run_cell_of_job in a thread, keeping its result or exception."""

    def __init__(self, wh: Warehouse, job_id: str, cell_key: str):
        self.records: list[TrialRecord] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(wh, job_id, cell_key), daemon=True)
        self.thread.start()

    def _run(self, wh: Warehouse, job_id: str, cell_key: str) -> None:
        try:
            self.records = pipeline.run_cell_of_job(wh, job_id, cell_key)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def sandboxes(names: tuple[str, ...]) -> list:
    """Containers (running or not) of Trials of the given Tasks."""
    client = docker_engine.connect()
    return [c for c in client.containers.list(all=True, filters={"label": SANDBOX_LABEL}, ignore_removed=True)
            if any(n in c.labels.get(SANDBOX_LABEL, "") for n in names)]


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def charge_entries(wh: Warehouse, job_id: str) -> list[wallet.Entry]:
    return [e for e in ledger(wh) if e.kind == "charge" and e.job_id == job_id]


@pytest.mark.docker
def test_cancel_stops_in_flight_trials_and_refunds_what_was_not_spent(tmp_path: Path, wh: Warehouse) -> None:
    token = os.urandom(3).hex()
    names = (f"hang-a-{token}", f"hang-b-{token}", f"hang-c-{token}")
    source = bench(tmp_path, "hang", dict(zip(names, ("ini-port-change", "fix-off-by-one", "count-log-errors"),
                                              strict=True)), sleeps=dict.fromkeys(names, 120))
    funded(wh)
    made, job = jobs.submit(wh, DEFAULT_WORKSPACE, local_user(), request(str(source), "oracle"))
    [cell] = cells_of(wh, job.id)
    run = Background(wh, job.id, cell.cell_key)
    try:
        wait_for(lambda: sum(c.status == "running" for c in sandboxes(names)) == 2, 90, "two running sandboxes")
        time.sleep(2)  # let the oracle's `sleep 120` begin
        cancelled_at = time.monotonic()
        assert jobs.cancel(wh, DEFAULT_WORKSPACE, job.id).status == "cancelled"
        run.thread.join(timeout=20)
        assert not run.thread.is_alive(), "run_cell_of_job did not return within 20 s of the cancel"
        assert run.error is None, repr(run.error)
        assert time.monotonic() - cancelled_at < 20
        assert sandboxes(names) == []
    finally:
        for c in sandboxes(names):  # never leave a container behind, even when an assertion failed
            c.remove(force=True)

    assert run.records is not None
    assert sorted(r.task_name for r in run.records) == sorted(names[:2])  # the third never started
    assert {r.outcome for r in run.records} == {"cancelled"}
    assert all(r.reward is None for r in run.records)
    assert trials_finished(wh, job.id) == 2  # the progress `amber job watch` shows: the stored rows
    assert charge_entries(wh, job.id) == []  # cancelled Trials are not charged
    assert get_job(wh, job.id, None).status == "cancelled"
    reserved, charged, refunded = totals(wh, made.id)
    assert reserved == made.amount and charged == 0 and refunded == reserved == charged + refunded
    row = spending(wh, job.id)
    assert row["settled"] is True and row["status"] == "cancelled"
    assert state(wh).reserved == 0 and state(wh).available == Decimal(100)

    # Stopped Trials measured nothing: the next Quote of this cell still knows nothing of its Tasks or its cell.
    again = quote(wh, source)
    assert again.cells[0].cell_key == cell.cell_key
    assert again.cells[0].sources == {"task": {"declared limits": 3}, "agent": {"declared limits": 3}}


# ---- 6. the ceiling ----------------------------------------------------------------------------------------

@pytest.mark.docker
def test_at_the_ceiling_no_trial_starts_in_flight_ones_stop_and_results_stay(tmp_path: Path,
                                                                             wh: Warehouse) -> None:
    """The Quote is made from the Tasks' declared limits at the default prices; the cell runs at a sandbox price
    10,000 times higher, so Task a's oracle alone, two seconds long, costs more than the whole Quote pays for."""
    token = os.urandom(3).hex()
    a, b, c = f"ceil-a-{token}", f"ceil-b-{token}", f"ceil-c-{token}"
    steep = Prices(sandbox_usd_per_hour=PRICES.sandbox_usd_per_hour * 10_000)
    seconds = 2
    source = bench(tmp_path, "ceil", {a: "ini-port-change", b: "fix-off-by-one", c: "count-log-errors"},
                   sleeps={a: seconds, b: 120})
    funded(wh)
    asked = request(str(source), "oracle", bounds=True)
    reservation = jobs.estimate(wh, DEFAULT_WORKSPACE, local_user(), asked).total
    assert steep.sandbox_cost(seconds) > reservation  # a's sandbox time costs more
    made, job = jobs.submit(wh, DEFAULT_WORKSPACE, local_user(), asked)
    assert made.amount == reservation
    cells = {cl.agent: cl for cl in cells_of(wh, job.id)}
    try:
        records = pipeline.run_cell_of_job(wh, job.id, cells["oracle"].cell_key, prices=steep)
    finally:
        leftovers = sandboxes((a, b, c))
        for container in leftovers:
            container.remove(force=True)
    assert leftovers == []

    by_task = {r.task_name: r for r in records}
    assert set(by_task) == {a, b}  # c never started
    assert by_task[a].outcome == "scored" and by_task[a].reward == 1.0
    assert by_task[a].duration_sec >= seconds
    assert by_task[b].outcome == "cancelled"
    [charge] = charge_entries(wh, job.id)
    assert charge.trial_key == by_task[a].key
    assert steep.sandbox_cost(by_task[a].duration_sec) > made.amount  # what it cost is more than the Quote,
    assert charge.amount == made.amount == Decimal(str(by_task[a].cost_usd))  # so it is charged the Quote, no more
    finished = get_job(wh, job.id, None)
    assert finished.status == "ceiling_reached" and "reached its Quote" in (finished.message or "")
    cell_status = {cl.agent: cl.status for cl in cells_of(wh, job.id)}
    assert cell_status == {"oracle": "done", "nop": "cancelled"}

    assert pipeline.run_cell_of_job(wh, job.id, cells["nop"].cell_key) == []
    assert {cl.agent: cl.status for cl in cells_of(wh, job.id)}["nop"] == "cancelled"
    assert get_job(wh, job.id, None).status == "ceiling_reached"
    with wh.query(DEFAULT_WORKSPACE) as con:
        visible = con.execute("select task_name, outcome, reward from trials where job_id = ? order by task_name",
                              [job.id]).fetchall()
    assert visible == [(a, "scored", 1.0), (b, "cancelled", None)]
    reserved, charged, refunded = totals(wh, made.id)
    assert reserved == charged + refunded and refunded == 0
    assert spending(wh, job.id)["settled"] is True
    assert state(wh).balance == Decimal(100) - made.amount and state(wh).reserved == 0


def test_a_trial_that_cost_nothing_does_not_reach_the_ceiling(tmp_path: Path, wh: Warehouse) -> None:
    funded(wh)
    source = bench(tmp_path, "one", {"ini-port-change": "ini-port-change"})
    made, job = jobs.submit(wh, DEFAULT_WORKSPACE, local_user(), request(str(source), "oracle"))
    charge = jobs.charge_trial(wh, job.id, f"{job.id}/free", 0.0)
    assert charge.amount == 0 and not charge.ceiling_reached
    assert get_job(wh, job.id, None).status == "running"
    assert {cl.status for cl in cells_of(wh, job.id)} == {"pending"}
    assert totals(wh, made.id) == (made.amount, 0, 0)



def test_a_cell_run_that_fails_before_its_first_trial_ends_its_cell_and_settles_its_job(tmp_path: Path,
                                                                                         wh: Warehouse) -> None:
    funded(wh)
    source = bench(tmp_path, "one", {"ini-port-change": "ini-port-change"})
    made, job = jobs.submit(wh, DEFAULT_WORKSPACE, local_user(), request(str(source), "oracle"))
    [cell] = cells_of(wh, job.id)
    with wh.write() as con:  # its Agent is no longer the one the Job was quoted for, as after an upgrade
        con.execute("update job_cells set agent = 'nop' where job_id = ?", [job.id])
    with pytest.raises(AmberError, match="changed since"):
        pipeline.run_trials(wh, job.id, cell.cell_key)
    # The run failed at its first read: the cell ends failed, saying why, and its Job settles, instead of a
    # pending cell (which nothing launches again, since it has a run) holding the Job open with its money.
    [after] = cells_of(wh, job.id)
    assert after.status == "failed" and "changed since" in (after.message or ""), after
    assert get_job(wh, job.id, None).status == "failed"
    assert totals(wh, made.id) == (made.amount, 0, made.amount)

# ---- 7. the CLI ----------------------------------------------------------------------------------------------

def refused(result, *fragments: str) -> None:
    one_sentence(refusal(result), *fragments)


@pytest.mark.docker  # `amber job start` pings the Docker engine (no Trial runs)
def test_the_money_flow_through_the_cli(tmp_path: Path, wh: Warehouse) -> None:
    source = bench(tmp_path, "cli-bench", {"ini-port-change": "ini-port-change", "fix-off-by-one": "fix-off-by-one"})
    ok(cli("workspace", "create", "team"))
    refused(cli("--user", "mallory", "--workspace", "team", "credit", "add", "--amount", "1", "--reason", "please"),
            "Only Amber staff can add a Credit", "mallory")
    refused(cli("--workspace", "team", "credit", "add", "--amount", "1"), "needs a reason")
    assert ok(cli("--workspace", "team", "credit", "add", "--amount", "1", "--reason", "trial credit")) == \
        "Credited $1.00 to Workspace team.\n"

    out = ok(cli("--workspace", "team", "job", "quote", str(source), "--agent", "oracle"))
    quote_id = re.search(r"amber job start (quote-[0-9a-f]+)", out)
    assert quote_id, out
    made = quotes.get(wh, "team", quote_id.group(1))
    assert "declared limits" in out and made.job_id in out and f"Reserved {show(made.amount)}" in out
    assert get_job(wh, made.job_id, "team").status == "quoted"
    out = ok(cli("--workspace", "team", "job", "start", made.id))
    assert f"Started {made.job_id}" in " ".join(out.split())
    assert get_job(wh, made.job_id, "team").status == "running"

    money = json.loads(ok(cli("--workspace", "team", "wallet", "--json")))
    assert Decimal(money["balance"]) == 1 and Decimal(money["reserved"]) == made.amount > 0
    assert Decimal(money["available"]) == 1 - made.amount
    assert [e["kind"] for e in money["ledger"]] == ["credit", "reservation"]
    assert money["ledger"][0]["reason"] == "trial credit"

    out = ok(cli("--workspace", "team", "job", "cancel", made.job_id))
    assert f"{made.job_id} is cancelled" in out
    money = json.loads(ok(cli("--workspace", "team", "wallet", "--json")))
    assert Decimal(money["reserved"]) == 0 and Decimal(money["available"]) == 1 == Decimal(money["balance"])
    assert [(e["kind"], Decimal(e["amount"])) for e in money["ledger"]][1:] == [
        ("reservation", made.amount), ("refund", made.amount)]
    out = ok(cli("--workspace", "team", "sql",
                 f"select status, settled from job_spending where job_id = '{made.job_id}'"))
    assert re.search(r"cancelled\s*│\s*True", out), out
    # A started (now cancelled) Job's Quote cannot be started again: such a Job goes on with `job continue`.
    refused(cli("--workspace", "team", "job", "start", made.id), made.job_id, "started already and is cancelled",
            f"amber job continue {made.job_id}")
