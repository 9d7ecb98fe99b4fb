"""Jobs that finish: a first Job on Tasks nobody has run, and Jobs whose processes are killed, on a running
embedded Amber (its Dagster daemon, warm worker and code server, as `amber daemon start` leaves them).

- Tasks whose Environments take seconds to build and whose Verifiers take 5-10 s
  (tests/fixtures/slow-bench), never run on this instance and never validated: the nop Job, then the oracle
  Job, each completes on the first try with every Trial scored. Their Quotes were made from the Tasks'
  declared limits, so they never stopped at a ceiling.
- Every process of the instance but the daemon (the cell run, the warm worker, the code server) is killed with
  SIGKILL at each failpoint of `amber_pipeline.failpoints` and in the middle of a Trial; and, separately, the
  daemon too, which is then started again as after a machine restart. Every Job completes with all its
  Trials, each charged once, reserved = charged + refunded, and no container left.
- A cell whose run dies every time is resumed twice, then ends failed with its reason, its Job settled.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
from helpers import cli, costs_and_charges, ok, trial_sandboxes

from amber_pipeline import embedded, failpoints
from amber_pipeline.jobs import records
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

pytestmark = pytest.mark.docker

SLOW_BENCH = PROJECT_ROOT / "tests" / "fixtures" / "slow-bench"
DEMO = PROJECT_ROOT / "examples" / "demo-bench"
DEMO_TASKS = ("count-log-errors", "fix-off-by-one", "ini-port-change")
JOB_END_SEC = 360


@dataclass
class Instance:
    paths: AmberPaths
    wh: Warehouse
    control: Path  # the failpoint file every cell run of the instance reads (AMBER_FAILPOINT)
    tmp: Path


@pytest.fixture(scope="module")
def amber(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    """An embedded Amber with its daemon running, its cell runs armed to die at the failpoint the control file
    names (none while it does not exist)."""
    tmp = tmp_path_factory.mktemp("finish")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_HOME", str(tmp / "amber"))
        mp.setenv("AMBER_CONFIG", str(tmp / "config.toml"))
        mp.setenv(failpoints.ENV, str(tmp / "failpoint"))
        paths = AmberPaths.from_env()
        ok(cli("workspace", "create", "default"))
        ok(cli("credit", "add", "--amount", "100", "--reason", "tests of Jobs that finish"))
        embedded.start_daemon(paths)
        try:
            yield Instance(paths, Warehouse(paths), tmp / "failpoint", tmp)
        finally:
            embedded.stop_daemon(paths)
            for pid in instance_processes(paths):
                os.kill(pid, signal.SIGKILL)


def instance_processes(paths: AmberPaths) -> list[int]:
    """Every process started for this instance (its environment names its Dagster home): the daemon, the warm
    worker, the code server, the cell runs."""
    wanted = f"DAGSTER_HOME={paths.dagster_home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_instance(paths: AmberPaths, *, daemon_too: bool = False) -> list[int]:
    """SIGKILL every process of the instance (but its daemon, unless ``daemon_too``), as an out-of-memory killer
    or a power cut would; the pids killed."""
    daemon = embedded.daemon_pid(paths)
    killed = [pid for pid in instance_processes(paths) if daemon_too or pid != daemon]
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return killed


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def submit(amber: Instance, bench: Path, agent: str, trials: int = 1) -> str:
    out = ok(cli("job", "submit", str(bench), "--agent", agent, "--trials", str(trials)))
    return next(word for word in out.split() if word.startswith("job-")).rstrip(".")


def ended(amber: Instance, job_id: str) -> records.Job:
    wait_for(lambda: records.get_job(amber.wh, job_id, None).ended
             and not any(c.status == "running" for c in records.cells_of(amber.wh, job_id)), JOB_END_SEC,
             f"{job_id} to end")
    return records.get_job(amber.wh, job_id, None)


def sandboxes_of(amber: Instance, job_id: str) -> list:
    return trial_sandboxes(docker.from_env(), amber.paths.runs / job_id)


def assert_finished(amber: Instance, job_id: str, n_trials: int, reward: float | None = None) -> None:
    """What a user checks: the Job completed with every Trial scored, each charged once and shown at its
    charge, its money settled, and nothing of it left in Docker."""
    job = ended(amber, job_id)
    assert job.status == "completed", job
    with amber.wh.query() as con:
        rows = con.execute("select task_name, attempt, outcome, reward from trials where job_id = ?",
                           [job_id]).fetchall()
        reserved, charged, refunded, settled = con.execute(
            "select reserved, charged, refunded, settled from job_spending where job_id = ?", [job_id]).fetchone()
        twice = con.execute("select trial_key from ledger where kind = 'charge' and job_id = ? group by trial_key "
                            "having count(*) > 1", [job_id]).fetchall()
    assert len(rows) == n_trials and len({(t, a) for t, a, _, _ in rows}) == n_trials, rows
    assert all(outcome == "scored" for _, _, outcome, _ in rows), rows
    if reward is not None:
        assert {r for _, _, _, r in rows} == {reward}, rows
    assert settled and reserved == charged + refunded and charged > 0, (reserved, charged, refunded)
    assert twice == []
    costs, charges = costs_and_charges(amber.wh, job_id)
    assert costs == charges and len(charges) == n_trials
    wait_for(lambda: not sandboxes_of(amber, job_id), 60, f"the sandboxes of {job_id} to go")


def fresh_copy(source: Path, target: Path, names: tuple[str, ...] | None = None) -> Path:
    """A copy of a Benchmark's Tasks whose images nothing has built, not even in part: right after its FROM line,
    each Dockerfile sets a value of its own, so no layer of Docker's build cache matches."""
    for task in sorted(p for p in source.iterdir() if (p / "task.toml").is_file()):
        if names is None or task.name in names:
            shutil.copytree(task, target / task.name)
            dockerfile = target / task.name / "environment" / "Dockerfile"
            base, rest = dockerfile.read_text().split("\n", 1)
            dockerfile.write_text(f"{base}\nENV AMBER_FRESH_COPY={os.urandom(6).hex()}\n{rest}")
    return target


# ---- a first Job on Tasks nobody ran ------------------------------------------------------------------------

def test_a_first_job_on_tasks_nobody_ran_finishes_nop_then_oracle(amber: Instance) -> None:
    bench = fresh_copy(SLOW_BENCH, amber.tmp / "slow-bench")
    quoted = ok(cli("job", "quote", str(bench), "--agent", "nop"))
    assert "Environment and Verifier: declared limits (3 Tasks)" in quoted and "3 image builds" in quoted, quoted

    nop = submit(amber, bench, "nop")
    assert_finished(amber, nop, 3, reward=0.0)
    oracle = submit(amber, bench, "oracle")
    assert_finished(amber, oracle, 3, reward=1.0)
    with amber.wh.query() as con:  # the Verifiers took their 5-10 s, and the first Trial of a Task its build
        verifier, image = con.execute("select min(verifier_sec), max(image_sec) from trials where job_id = ?",
                                      [nop]).fetchone()
    assert verifier >= 5 and image > 3, (verifier, image)
    # The oracle's Quote knew the Tasks from nop's Trials: their part came from Task history.
    shown = ok(cli("job", "quote", str(bench), "--agent", "oracle"))
    assert "Environment and Verifier: Task history (3 Tasks)" in shown, shown


# ---- a crash resumes -----------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("point", ["after_rows", "after_charge", "aggregates"])
def test_every_process_but_the_daemon_killed_at_a_failpoint_and_the_job_completes(amber: Instance,
                                                                                  point: str) -> None:
    """after_rows: a Trial's row stored, its charge not yet made; after_charge: charged, the row not yet showing
    it; aggregates: every Trial stored, killed while the scores are written."""
    bench = fresh_copy(DEMO, amber.tmp / f"demo-{point}", DEMO_TASKS)
    amber.control.write_text(point)
    job_id = submit(amber, bench, "oracle", trials=2)
    wait_for(lambda: not amber.control.exists(), JOB_END_SEC, f"the cell run to reach {point}")
    kill_instance(amber.paths)
    assert embedded.daemon_pid(amber.paths) is not None
    assert_finished(amber, job_id, 2 * len(DEMO_TASKS), reward=1.0)


@pytest.mark.slow
def test_every_process_but_the_daemon_killed_mid_trial_and_the_job_completes(amber: Instance) -> None:
    bench = fresh_copy(SLOW_BENCH, amber.tmp / "slow-mid-trial")
    job_id = submit(amber, bench, "oracle", trials=2)
    wait_for(lambda: sandboxes_of(amber, job_id), JOB_END_SEC, "a Trial's sandbox")
    time.sleep(3)
    kill_instance(amber.paths)
    assert_finished(amber, job_id, 6, reward=1.0)


@pytest.mark.slow
def test_the_daemon_killed_too_and_started_again_and_the_job_completes(amber: Instance) -> None:
    """As after a power cut: nothing of the instance runs; `amber daemon start` picks up the Job."""
    bench = fresh_copy(SLOW_BENCH, amber.tmp / "slow-restart")
    job_id = submit(amber, bench, "oracle", trials=2)
    wait_for(lambda: sandboxes_of(amber, job_id), JOB_END_SEC, "a Trial's sandbox")
    time.sleep(3)
    kill_instance(amber.paths, daemon_too=True)
    wait_for(lambda: not instance_processes(amber.paths), 30, "every process of the instance to die")
    assert records.get_job(amber.wh, job_id, None).status == "running"
    time.sleep(2)
    started = subprocess.run([str(PROJECT_ROOT / ".venv" / "bin" / "amber"), "daemon", "start"], env=os.environ,
                             capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    assert_finished(amber, job_id, 6, reward=1.0)


@pytest.mark.slow
def test_a_cell_whose_run_keeps_dying_is_resumed_twice_then_fails_with_its_reason(amber: Instance) -> None:
    bench = fresh_copy(DEMO, amber.tmp / "demo-always", DEMO_TASKS)
    amber.control.write_text("after_rows")
    job_id = submit(amber, bench, "oracle", trials=2)
    for death in range(3):  # the first run, then each of its two resumes
        wait_for(lambda: not amber.control.exists(), JOB_END_SEC, f"death {death + 1}")
        if death < 2:
            amber.control.write_text("after_rows")
    job = ended(amber, job_id)
    assert job.status == "failed", job
    [cell] = records.cells_of(amber.wh, job_id)
    assert cell.status == "failed" and "resumed 2 times after its worker died" in (cell.message or ""), cell
    with amber.wh.query() as con:
        reserved, charged, refunded, settled = con.execute(
            "select reserved, charged, refunded, settled from job_spending where job_id = ?", [job_id]).fetchone()
        n_rows = con.execute("select count(*) from trials where job_id = ? and outcome = 'scored'",
                             [job_id]).fetchone()[0]
    assert f"after {n_rows} of 6 Trials" in (cell.message or ""), cell  # each death kept the Trial it stored
    assert n_rows >= 3 and settled and reserved == charged + refunded
    costs, charges = costs_and_charges(amber.wh, job_id)
    assert costs == charges and len(charges) == n_rows
    wait_for(lambda: not sandboxes_of(amber, job_id), 60, f"the sandboxes of {job_id} to go")
