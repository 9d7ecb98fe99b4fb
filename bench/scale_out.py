"""Scale-out overheads: the Wallet race on PostgreSQL against DuckDB, and Trials on two engines against one.

Wallet (`FIGURE pg_wallet_writes_per_s`): 8 writer processes, each cycling over 8 Workspaces, write Wallet
transactions (reserve a Quote, charge one Trial attempt, refund the rest: three transactions per round) for
a fixed time against one catalog, started together. DuckDB serializes every writer on one file lock;
PostgreSQL serializes only the writes of one Workspace (a row lock). Afterwards the ledger is replayed:
every Quote reserved once, charged once, refunded once, and no Workspace below zero. The ratio is PostgreSQL's
rate over DuckDB's, measured in the same run.

On 2 cores this measures overhead, not capacity: eight writers and the server share two cores, so a
rate here says what one Wallet write costs, not how many a real deployment takes.

Engines (`FIGURE two_engine_trials_ratio`): 32 nop Trials (4 Jobs, each of the 8 demo Tasks x 1 Trial under
names of its own, so 4 nop cells of 4 Benchmark Versions) run as Amber runs them: the cells claimed and placed
on engine pools (`records.claim_cells`, `placement.py`), then one forked process per cell run (as the warm worker
forks them), at most a pool's slots at once, each driving its Trials (2 at a time) in sandboxes on its pool's
engine (`cell_run.run_cell_of_job`).
Once with AMBER_SANDBOX_HOSTS listing only the machine's own engine with 4 slots, once listing it with 2 slots
and a second dockerd (`tests/servers/dockerd.py`, on loopback over mutual TLS) with 2, so that as many cell
runs and Trials run at once in both. Each run is timed from the claim to the last cell run's exit, in a fresh
AMBER_HOME; the configurations take turns for 3 rounds (one first, then two first), and the figure is the median
one-engine seconds over the median two-engine seconds (above 1: two engines were faster). The Task images are
built on both engines before timing. After each run every one of the 32 Trials must have a row (scored, Reward
0), each Job must be completed, each Trial's sandbox must have been on its cell's pool's engine, and no sandbox
of the run may be left on either engine.

On 2 cores this too measures overhead, not capacity: both engines run on this one machine and share its two
cores, so a second engine adds no CPU; the ratio says what spreading cells over engines costs (placement's
engine checks, TLS to the second engine, a second dockerd and containerd), not how far a second host scales.

`--smoke` is a small run of both for the test suite: 2 writers over 2 Workspaces for 1 s; 2 Jobs of 1 Task
on 2 slots (a cell on each engine in the two-engine run), one round.

    .venv/bin/python bench/scale_out.py [--only wallet|engines] [--seconds 10] [--writers 8] [--workspaces 8]
                                        [--jobs 4] [--tasks 8] [--slots 4] [--rounds 3] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from collections import Counter
from decimal import Decimal
from multiprocessing.process import BaseProcess
from pathlib import Path

import docker
from synthetic import scratch_home

from amber_pipeline.accounts import workspaces
from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.jobs import cell_run, lifecycle, records
from amber_pipeline.jobs.records import CellLaunch
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.sandbox import container
from amber_pipeline.sandbox import environment as sandbox
from amber_pipeline.warehouse.catalog import Warehouse

sys.path.insert(0, str(PROJECT_ROOT / "tests"))
from helpers import funded  # noqa: E402  (a funded Workspace, as a user gets one)
from servers import dockerd, postgres  # noqa: E402  (the tests' own loopback servers)

DEMO_BENCH = PROJECT_ROOT / "examples" / "demo-bench"
LOCAL_URL = "unix:///var/run/docker.sock"  # the machine's own engine, as engines_toml lists it

WRITER = textwrap.dedent("""
    import json, sys, time
    from datetime import UTC, datetime
    from decimal import Decimal
    from amber_pipeline.money import wallet
    from amber_pipeline.paths import AmberPaths
    from amber_pipeline.warehouse.catalog import Warehouse

    me, seconds, names = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(",")
    wh = Warehouse(AmberPaths.from_env())
    with wh.read():
        pass  # connect and make the schema before the start
    print("ready", flush=True)
    sys.stdin.readline()
    n = writes = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ws = names[n % len(names)]
        quote, job = f"q-{me}-{n}", f"job-{me}-{n}"
        with wh.write(ws) as con:
            wallet.reserve(con, ws, quote, job, Decimal("0.01"), datetime.now(UTC))
        with wh.write(ws) as con:
            wallet.charge(con, ws, quote, job, f"{job}/t/1", Decimal("0.004"))
        with wh.write(ws) as con:
            wallet.release(con, ws, quote, job, "done")
        n += 1
        writes += 3
    print(json.dumps({"writes": writes, "rounds": n}), flush=True)
""")


def race(home: Path, writers: int, names: list[str], seconds: float) -> tuple[float, int]:
    """(writes per second, rounds) of ``writers`` processes started together on the catalog in the environment."""
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(i), str(seconds), ",".join(names)],
                              cwd=PROJECT_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for i in range(writers)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [json.loads(p.communicate(timeout=seconds + 120)[0].strip().splitlines()[-1]) for p in procs]
    return sum(r["writes"] for r in results) / seconds, sum(r["rounds"] for r in results)


def check(wh: Warehouse, names: list[str], rounds: int, funded: Decimal) -> None:
    """Every round reserved, charged and refunded exactly once; every Wallet exact."""
    spent = Decimal(0)
    for ws in names:
        state, entries = wallet.read(wh, ws)
        charges = [e for e in entries if e.kind == "charge"]
        assert state.reserved == 0 and state.available >= 0, (ws, state)
        assert state.balance == funded - sum(e.amount for e in charges), ws
        assert len({e.quote_id for e in charges}) == len(charges), ws
        spent += sum(e.amount for e in charges)
    assert spent == Decimal("0.004") * rounds, (spent, rounds)


def wallet_race(args: argparse.Namespace) -> None:
    names = [f"ws{i}" for i in range(args.workspaces)]
    funding = Decimal("1000")
    rates = {}
    with postgres.running() as server:
        for kind in ("duckdb", "postgresql"):
            with scratch_home(f"amber-scale-{kind}-", keep=False) as home:
                if kind == "postgresql":
                    os.environ["AMBER_CATALOG_URL"] = server.create_database("wallet_race")
                else:
                    os.environ.pop("AMBER_CATALOG_URL", None)
                wh = Warehouse(AmberPaths.from_env())
                actor = Actor(local_user(), names[0])
                for ws in names:
                    workspaces.create(wh, Actor(actor.user, ws), ws)
                    wallet.add_credit(wh, Actor(actor.user, ws), ws, str(funding), "bench")
                rate, rounds = race(home, args.writers, names, args.seconds)
                check(wh, names, rounds, funding)
                rates[kind] = rate
                print(f"{kind}: {args.writers} writers x {args.workspaces} Workspaces, {rate:.0f} Wallet writes/s "
                      f"({rounds} rounds of reserve, charge, refund; ledger replayed exact)")
    os.environ.pop("AMBER_CATALOG_URL", None)
    print(f"FIGURE pg_wallet_writes_per_s {rates['postgresql']:.0f} writes/s")
    print(f"FIGURE duckdb_wallet_writes_per_s {rates['duckdb']:.0f} writes/s")
    print(f"FIGURE pg_wallet_writes_ratio {rates['postgresql'] / rates['duckdb']:.2f} x")


# ---- Trials on two engines against one ------------------------------------------------------------------

def demo_benches(folder: Path, jobs: int, tasks: int) -> list[Path]:
    """A Benchmark folder per Job: the first ``tasks`` demo Tasks under names of its own, so each Job's cell is the
    only one of its Benchmark Version. (With 4 cells of one version running at once, a cell run's scoring, which
    reads every Trial file of the version, failed here once with "TProtocolException: Invalid data" while the other
    runs were rewriting theirs.) The Task images stay the same on every engine: they are tagged by content."""
    names = sorted(p.name for p in DEMO_BENCH.iterdir() if (p / "task.toml").is_file())[:tasks]
    for job in range(jobs):
        for name in names:
            shutil.copytree(DEMO_BENCH / name, folder / f"bench{job}" / f"{name}-{job}")
    return [folder / f"bench{job}" for job in range(jobs)]


def build_images(client: docker.DockerClient, benches: list[Path]) -> int:
    """Build the Tasks' environment images on an engine as a sandbox would (`task_image.ensure_image`), so
    no timed Trial builds one; how many were missing."""
    built = 0
    for env in sorted(e for bench in benches for e in bench.glob("*/environment")):
        tag = sandbox.image_tag(env)
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            client.images.build(path=str(env), tag=tag, rm=True, forcerm=True, pull=False,
                                labels={sandbox.SANDBOX_LABEL: "environment"})
            built += 1
    return built


def one_engine_toml(slots: int) -> str:
    return f'\n[[engine]]\nname = "local"\nurl = "{LOCAL_URL}"\nslots = {slots}\n'


def _cell_run(job_id: str, cell_key: str) -> None:
    """A cell run in a forked process, as the warm worker's fork runs it (its catalog opened afresh)."""
    cell_run.run_cell_of_job(Warehouse(AmberPaths.from_env()), job_id, cell_key)


def drive(wh: Warehouse, slots: dict[str, int]) -> tuple[float, list[CellLaunch]]:
    """Claim the started Jobs' cells (placed on pools) and run each in a forked process, at most a pool's slots
    at once; the seconds from the claim to the last exit, and the launches."""
    fork = multiprocessing.get_context("fork")
    started = time.perf_counter()
    launches = records.claim_cells(wh)
    waiting = {pool: [c for c in launches if c.pool == pool] for pool in slots}
    assert sum(map(len, waiting.values())) == len(launches), [c.pool for c in launches]
    running: dict[int, tuple[BaseProcess, str]] = {}  # by sentinel
    failed: list[str] = []
    while any(waiting.values()) or running:
        for pool, cells in waiting.items():
            while cells and sum(1 for _, p in running.values() if p == pool) < slots[pool]:
                cell = cells.pop(0)
                proc = fork.Process(target=_cell_run, args=(cell.job_id, cell.cell_key), name=cell.cell_name)
                proc.start()
                running[proc.sentinel] = (proc, pool)
        ready = set(multiprocessing.connection.wait(list(running)))
        for sentinel in [s for s in running if s in ready]:
            ended, _ = running.pop(sentinel)
            ended.join()
            if ended.exitcode != 0:  # no new run; the others end before the scratch home goes
                failed.append(f"{ended.name} exited {ended.exitcode}")
                waiting = {pool: [] for pool in waiting}
    assert not failed, f"cell runs failed: {failed}"
    return time.perf_counter() - started, launches


def engines_of_trials(wh: Warehouse, launch: CellLaunch) -> Counter:
    """The engine each of a cell's Trial sandboxes was given, from Harbor's config.json in its Trial folder (the
    engines' own event logs keep only their last 256 events, too few to count Trials by)."""
    return Counter(json.loads(f.read_text())["environment"]["kwargs"].get("amber_engine")
                   for f in records.run_dir(wh, launch.job_id, launch.cell_key).glob("*/config.json"))


def leftovers(client: docker.DockerClient, home: Path) -> list[str]:
    return [c.name for found in container.sandboxes_on(client, home).values() for c in found]


def nop_trials(label: str, toml: str, slots: dict[str, int], benches: list[Path], args: argparse.Namespace,
               clients: dict[str, docker.DockerClient]) -> float:
    """One configuration: the Jobs submitted, their cells driven, everything checked; the seconds."""
    with scratch_home(f"amber-scale-{label}-", keep=False) as home:
        hosts = home / "engines.toml"
        hosts.write_text(toml)
        os.environ["AMBER_SANDBOX_HOSTS"] = str(hosts)
        try:
            wh = Warehouse(AmberPaths.from_env())
            funded(wh, DEFAULT_WORKSPACE)
            jobs = [lifecycle.submit(wh, DEFAULT_WORKSPACE, local_user(),
                                     JobRequest(benchmark=str(bench), agent="nop"))[1].id
                    for bench in benches]
            seconds, launches = drive(wh, slots)
        finally:
            os.environ.pop("AMBER_SANDBOX_HOSTS", None)
        expected = args.jobs * args.tasks
        status = [(j.status, j.message) for j in (records.get_job(wh, job, None) for job in jobs)]
        assert all(s == "completed" for s, _ in status), status
        with wh.query(None, ["trials"]) as con:
            rows = con.execute("select outcome, reward, count(*) from trials where job_id in (select unnest(?)) "
                               "group by 1, 2", [jobs]).fetchall()
        assert rows == [("scored", 0.0, expected)], rows  # every Trial has its row: scored, Reward 0
        left = {name: leftovers(client, home) for name, client in clients.items()}
        assert not any(left.values()), f"sandboxes left: {left}"
        made: Counter = Counter()
        for launch in launches:  # every Trial on its cell's pool's engine (each pool here is one engine)
            on = engines_of_trials(wh, launch)
            assert on == Counter({launch.pool: args.tasks}), (launch.cell_name, launch.pool, on)
            made += on
        cells = Counter(c.pool for c in launches)
    spread = ", ".join(f"{pool} {cells[pool]} cells / {made[pool]} Trials" for pool in slots)
    print(f"{label} engine{'s' if len(slots) > 1 else ''} ({spread}; slots "
          f"{', '.join(f'{p} {n}' for p, n in slots.items())}): {expected} nop Trials in {seconds:.1f} s "
          f"(all scored, Reward 0; no sandbox left)")
    return seconds


def two_engines(args: argparse.Namespace) -> None:
    if os.geteuid() != 0:
        raise SystemExit("A second Docker engine needs root.")
    primary = docker.DockerClient(base_url=LOCAL_URL, timeout=300)
    before = dockerd.primary_pid(), dockerd.PRIMARY_BRIDGE.exists()
    with dockerd.running() as engine2:
        loaded_in = engine2.load_image(dockerd.BASE_IMAGE, primary)
        remote = engine2.client(timeout=300)
        benches = demo_benches(engine2.folder / "benches", args.jobs, args.tasks)  # outside AMBER_HOME, to quote
        built = build_images(primary, benches), build_images(remote, benches)
        print(f"engine 2 answered in {engine2.started_in:.2f} s; {dockerd.BASE_IMAGE} loaded in {loaded_in:.1f} s; "
              f"Task images built: {built[0]} local, {built[1]} on engine 2")
        clients = {"local": primary, "engine2": remote}
        half = args.slots // 2
        configurations = {
            "one": (one_engine_toml(args.slots), {"local": args.slots}),
            "two": (dockerd.engines_toml(engine2, local_slots=args.slots - half, slots=half),
                    {"local": args.slots - half, "engine2": half})}
        seconds: dict[str, list[float]] = {"one": [], "two": []}
        for r in range(args.rounds):  # in turns, one first then two first, so drift and warm-up fall on both
            for label in ("one", "two") if r % 2 == 0 else ("two", "one"):
                toml, slots = configurations[label]
                seconds[label].append(nop_trials(label, toml, slots, benches, args, clients))
        remote.close()
    assert (dockerd.primary_pid(), dockerd.PRIMARY_BRIDGE.exists()) == before and primary.ping()
    primary.close()
    one, two = statistics.median(seconds["one"]), statistics.median(seconds["two"])
    print(f"median of {args.rounds} rounds: one engine {one:.1f} s, two engines {two:.1f} s. On 2 cores both "
          "engines share this machine's two cores: the ratio is overhead, not capacity.")
    print(f"FIGURE two_engine_trials_seconds_one {one:.1f} s")
    print(f"FIGURE two_engine_trials_seconds_two {two:.1f} s")
    print(f"FIGURE two_engine_trials_ratio {one / two:.2f} x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("wallet", "engines"), help="run one of the two measurements")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--workspaces", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=4, help="nop Jobs, one cell each (default 4)")
    parser.add_argument("--tasks", type=int, default=8, help="demo Tasks per Job, 1 Trial each (default 8)")
    parser.add_argument("--slots", type=int, default=4, help="cell runs at once, split over two engines (default 4)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each configuration, in turns (default 3)")
    parser.add_argument("--smoke", action="store_true", help="a small run of both (for the test suite): "
                        "--seconds 1 --writers 2 --workspaces 2 --jobs 2 --tasks 1 --slots 2 --rounds 1")
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.writers, args.workspaces = 1.0, 2, 2
        args.jobs, args.tasks, args.slots, args.rounds = 2, 1, 2, 1
    if args.slots < 2:
        parser.error("--slots must be at least 2, to give each engine one")
    if args.only in (None, "wallet"):
        wallet_race(args)
    if args.only in (None, "engines"):
        two_engines(args)


if __name__ == "__main__":
    main()
