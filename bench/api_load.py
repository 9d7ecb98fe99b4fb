"""API load: concurrent clients making Quotes and reading results against one hosted server, on loopback.

Measures what one `python -m server` process (the app `amber serve` runs) answers when 20 clients, each a thread
with its own HTTP connection and its own user's token, alternate for 60 s between the two requests a user makes
most: a Quote (POST .../quotes, by label, `trials_per_task` 1: a catalog write that reserves money) and a Job's
results (GET .../jobs/{id}/results: a read of Trial Parquet through DuckDB, the report with its cells). Half the
clients start with each, so the mix is even throughout. The rate is every request answered over the wall time
from the start to the last answer; the p99 is over every request's latency, both kinds.

It runs twice, each time from scratch: on the PostgreSQL catalog a hosted Amber uses (`AMBER_CATALOG_URL`, a
database of a server the bench starts as the tests start theirs, `tests/servers/postgres.py`), whose figures are
`FIGURE api_requests_per_s` and `FIGURE api_p99_ms`; then on the DuckDB default under AMBER_HOME,
`FIGURE api_requests_per_s_duckdb` and `FIGURE api_p99_ms_duckdb`. DuckDB lets one process write its file at a
time, so every write of every Workspace waits for the one before, across processes: its figure is the lower one.
`FIGURE api_errors` counts the requests of both runs not answered with the record asked for, and
`FIGURE api_ledger_mismatches` the ledger checks below that failed; both must be 0.

The setup is done on the host with library calls in a fresh AMBER_HOME, as a server's host does it: 4
Workspaces of 5 clients each (several clients of one Workspace race for its Wallet, which is where a lost or
doubled reservation would show; several Workspaces check that each keeps its own money), each funded with a
Credit far above every Quote the run can make, each with the static bench registered by a Quote of its folder
(so `static-bench@1` is its own label) and that Job run in this process (`cell_run.run_cell_of_job`: the
Direct Agent against the replay double on loopback, no container), so every results read builds a real report.

After the run, with the server stopped, the bench fails (exit 1, saying why) unless:
- every request was answered 200 with the record it asks for (a Quote of the client's Workspace; a report
  with cells): a load that errors has no throughput worth printing;
- each Workspace's reservation entries (plain SQL on the catalog's `ledger`) are exactly one per Quote a
  client got back, plus the setup Quote, with the amount the client was told: none lost, none doubled,
  none in another Workspace; each such Quote's Job is recorded as quoted;
- `wallet.read`'s state matches sums of the ledger rows made here independently: balance = credits -
  charges, reserved = reservations - charges - refunds = the sum of the live Quotes' amounts (the setup
  Job settled to 0), available = balance - reserved, and it lists every row.

A baseline (`FIGURE api_vs_inprocess_ratio`, PostgreSQL's): the same alternating mix run serially in this process
through `operations.call_local` (no HTTP, no server, no other client) after the load, on the catalog the load left;
the figure is the server's rate over that one in-process caller's. Above 1, the server with 20 clients gets
more done than one caller alone; below 1, HTTP and contention cost more than concurrency gains.

The PostgreSQL run's server is then fuzzed from its own OpenAPI document (`tests/servers/fuzz.py`, which
`tests/test_api_fuzz.py` runs too): every operation, as a member of a Workspace holding one of everything and
as a user of another, with boundary values and seeded cases of valid and invalid data. `FIGURE api_fuzz_cases`
is the number of cases it sent; the bench fails on any answer that is a 5xx, shows a traceback, or is not what
the document says.

Only loopback is used: the server binds 127.0.0.1, clients ignore proxy settings, and the replay double and
model proxy of the setup Jobs listen on 127.0.0.1.

    .venv/bin/python bench/api_load.py [--clients 20] [--workspaces 4] [--seconds 60] [--max-requests 20000]
                                       [--baseline-requests 40] [--fuzz-examples 3] [--smoke] [--keep]

`--smoke` is a small run for the test suite: 4 clients in 2 Workspaces (two racing for each Wallet) for 1 s on
each catalog, a baseline of one request of each kind, and one drawn fuzz case of each kind (no boundary values:
`tests/test_api_fuzz.py` asks those).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import httpx
from synthetic import scratch_home

from amber_pipeline import embedded
from amber_pipeline.accounts import identity, tokens, users, workspaces
from amber_pipeline.accounts.identity import Actor, local_user
from amber_pipeline.cli.client import tls
from amber_pipeline.jobs import cell_run, lifecycle, records
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet
from amber_pipeline.operations.areas import OPERATIONS  # every area's operations, the API's whole list
from amber_pipeline.operations.jobs import JobRef, QuoteRequest
from amber_pipeline.operations.operation import call_local
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

sys.path.insert(0, str(PROJECT_ROOT / "tests"))
from servers import fuzz, postgres  # noqa: E402  (the fuzz's home, and the tests' PostgreSQL server)

STATIC_BENCH = PROJECT_ROOT / "examples" / "static-bench"
HOST = "127.0.0.1"
FUNDING = Decimal("100000")  # a Quote of the static bench is cents: far more than --max-requests Quotes reserve
STARTUP_S = 60.0
REQUEST_TIMEOUT_S = 60.0  # a request in flight at the deadline still ends within this
KINDS = ("quote", "results")


@dataclass(frozen=True)
class Client:
    user: str
    token: str
    workspace: str
    label: str  # the Workspace's own label of the static bench
    job_id: str  # the Workspace's finished Job, whose results the client reads


@dataclass(frozen=True)
class Sample:
    kind: str
    status: int  # 0: no answer (a transport error)
    seconds: float
    problem: str | None  # why the answer is not what was asked for


@dataclass
class Tally:
    samples: list[Sample] = field(default_factory=list)
    quotes: dict[str, Decimal] = field(default_factory=dict)  # Quote id -> the amount the client was told


@dataclass(frozen=True)
class Setup:
    clients: list[Client]
    setup_quotes: dict[str, str]  # Workspace -> the Quote of its folder (its Job ran, so it is settled)


class Budget:
    """At most ``total`` requests across all clients (a safety bound beside the deadline)."""

    def __init__(self, total: int) -> None:
        self.left, self.lock = total, threading.Lock()

    def take(self) -> bool:
        with self.lock:
            self.left -= 1
            return self.left >= 0


# ---- setup, on the host --------------------------------------------------------------------------------------

def request(benchmark: str) -> JobRequest:
    return JobRequest(benchmark=benchmark, agent="direct", model_configurations=["replay-strong"], trials_per_task=1)


def finished_job(wh: Warehouse, workspace: str) -> tuple[str, str, str]:
    """(label, Job id, Quote id) of the static bench quoted by folder in ``workspace`` and run here to the end."""
    made = lifecycle.quote(wh, workspace, local_user(), request(str(STATIC_BENCH)))
    job = lifecycle.start(wh, workspace, made.id)
    for cell in records.cells_of(wh, job.id):
        cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
    status = records.get_job(wh, job.id, workspace).status
    if status != "completed":
        raise SystemExit(f"the setup Job {job.id} of {workspace} ended {status}, not completed")
    return made.benchmark_label, job.id, made.id


def set_up(wh: Warehouse, n_clients: int, n_workspaces: int) -> Setup:
    """Workspaces made and funded by the local (staff) login, each with a finished Job; a user with a token and
    membership per client, clients dealt to Workspaces in turn."""
    staff = local_user()
    jobs, setup_quotes = {}, {}
    for i in range(n_workspaces):
        ws = f"load{i}"
        workspaces.create(wh, Actor(staff, None), ws)
        wallet.add_credit(wh, Actor(staff, ws), ws, str(FUNDING), "api load bench")
        label, job_id, quote_id = finished_job(wh, ws)
        jobs[ws], setup_quotes[ws] = (label, job_id), quote_id
    clients = []
    for i in range(n_clients):
        user, ws = f"client{i:02d}", f"load{i % n_workspaces}"
        users.add(wh, user, staff)
        workspaces.add_member(wh, Actor(staff, ws), ws, user)
        clients.append(Client(user, tokens.create(wh, user, "api-load").secret, ws, *jobs[ws]))
    return Setup(clients, setup_quotes)


# ---- the server ----------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(paths: AmberPaths, log: Path) -> Iterator[str]:
    """`python -m server` on loopback over ``paths``, in a session of its own, stopped (it and only what it
    started) when the block ends; its URL once it answers."""
    port = free_port()
    with log.open("w") as sink:
        server = subprocess.Popen([sys.executable, "-m", "server", "--host", HOST, "--port", str(port)],
                                  cwd=PROJECT_ROOT, env=embedded.environment(paths), stdout=sink, stderr=sink,
                                  start_new_session=True)
    url = f"http://{HOST}:{port}"
    try:
        wait_for(server, url)
        yield url
    finally:
        stop(server)


def wait_for(server: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + STARTUP_S
    with httpx.Client(verify=tls(), base_url=url, timeout=5.0, trust_env=False) as http:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise SystemExit(f"the API server exited with {server.returncode} before answering")
            with contextlib.suppress(httpx.HTTPError):
                if http.get("/openapi.json").status_code == 200:
                    return
            time.sleep(0.1)
    raise SystemExit(f"the API server did not answer within {STARTUP_S:.0f} s")


def stop(server: subprocess.Popen) -> None:
    if server.poll() is not None:
        return
    os.killpg(server.pid, signal.SIGTERM)  # its own session: the group is the server and its children only
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)


# ---- the load ------------------------------------------------------------------------------------------------

def send(http: httpx.Client, client: Client, kind: str) -> httpx.Response:
    if kind == "quote":
        params = request(client.label).model_dump(mode="json")
        return http.post(OPERATIONS["job_quote"].path_for(client.workspace, {}), data={"params": json.dumps(params)})
    return http.get(OPERATIONS["job_results"].path_for(client.workspace, {"job_id": client.job_id}))


def problem_with(response: httpx.Response, client: Client, kind: str, tally: Tally) -> str | None:
    """Why an answer is not the record asked for (None: it is); a Quote's id and amount go into ``tally``."""
    if response.status_code != 200:
        return response.text[:200]
    try:
        body = response.json()
    except ValueError:
        return f"not JSON: {response.text[:200]}"
    if kind == "quote":
        if body.get("workspace") != client.workspace or not str(body.get("id", "")).startswith("quote-"):
            return f"not a Quote of {client.workspace}: {str(body)[:200]}"
        if body["id"] in tally.quotes:
            return f"Quote {body['id']} came back twice"
        tally.quotes[body["id"]] = Decimal(body["amount"])
        return None
    report = body.get("report") or {}
    return None if report.get("cells") else f"no report with cells: {str(body)[:200]}"


def drive(url: str, client: Client, first: int, deadline: list[float], budget: Budget,
          start: threading.Barrier, tally: Tally) -> None:
    """One client: alternate Quote and results read until the deadline (or the budget) runs out."""
    headers = {"authorization": f"Bearer {client.token}"}
    with httpx.Client(verify=tls(), base_url=url, headers=headers, timeout=REQUEST_TIMEOUT_S, trust_env=False) as http:
        start.wait()
        n = first
        while time.monotonic() < deadline[0] and budget.take():
            kind = KINDS[n % len(KINDS)]
            n += 1
            t0 = time.perf_counter()
            try:
                response = send(http, client, kind)
            except httpx.HTTPError as e:
                tally.samples.append(Sample(kind, 0, time.perf_counter() - t0, f"{type(e).__name__}: {e}"))
                continue
            seconds = time.perf_counter() - t0
            tally.samples.append(Sample(kind, response.status_code, seconds, problem_with(response, client, kind,
                                                                                          tally)))


def load(url: str, clients: list[Client], seconds: float, max_requests: int) -> tuple[list[Tally], float]:
    """Every client's tally and the wall time from the common start to the last answer."""
    tallies = [Tally() for _ in clients]
    deadline = [0.0]  # set once every client is connected, so connecting is not timed
    start = threading.Barrier(len(clients) + 1)
    budget = Budget(max_requests)
    threads = [threading.Thread(target=drive, args=(url, c, i, deadline, budget, start, t), name=c.user)
               for i, (c, t) in enumerate(zip(clients, tallies, strict=True))]
    for t in threads:
        t.start()
    deadline[0] = time.monotonic() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    return tallies, time.perf_counter() - t0


# ---- the checks ----------------------------------------------------------------------------------------------

def answer_failures(samples: list[Sample]) -> list[str]:
    bad = [s for s in samples if s.status != 200 or s.problem is not None]
    if not bad:
        return []
    by = Counter((s.kind, s.status) for s in bad)
    shown = ", ".join(f"{n} {kind} answered {status or 'nothing'}" for (kind, status), n in sorted(by.items()))
    return [f"{len(bad)} of {len(samples)} requests failed ({shown}); first: {bad[0].problem}"]


def ledger_failures(wh: Warehouse, ws: str, received: dict[str, Decimal], setup_quote: str) -> list[str]:
    """The Workspace's reservations against the Quotes its clients got back, and its Wallet against the rows."""
    with wh.read() as con:
        rows = con.execute("select kind, amount, quote_id from ledger where workspace = ?", [ws]).fetchall()
        elsewhere = con.execute("select count(*) from ledger where kind = 'reservation' and workspace <> ? and "
                                "quote_id in (select unnest(?))", [ws, list(received) or [""]]).fetchone()[0]
        quoted = {q for (q,) in con.execute("select quote_id from jobs where workspace = ? and status = 'quoted'",
                                            [ws]).fetchall()}
    failures = []
    reserved = Counter(q for kind, _, q in rows if kind == "reservation")
    amounts = {q: a for kind, a, q in rows if kind == "reservation"}
    expected = set(received) | {setup_quote}
    if lost := expected - set(reserved):
        failures.append(f"{ws}: {len(lost)} Quotes a client got back have no reservation, e.g. {min(lost)}")
    if doubled := [q for q, n in reserved.items() if n > 1]:
        failures.append(f"{ws}: {len(doubled)} Quotes have more than one reservation, e.g. {doubled[0]}")
    if stray := set(reserved) - expected:
        failures.append(f"{ws}: {len(stray)} reservations are of Quotes no client got back, e.g. {min(stray)}")
    if sum(reserved.values()) != len(expected):
        failures.append(f"{ws}: {sum(reserved.values())} reservation entries for {len(expected)} Quotes")
    if wrong := [q for q, a in received.items() if amounts.get(q, a) != a]:
        failures.append(f"{ws}: {len(wrong)} reservations differ from the amount quoted, e.g. {wrong[0]}")
    if elsewhere:
        failures.append(f"{ws}: {elsewhere} of its clients' Quotes are reserved in another Workspace")
    if unrecorded := set(received) - quoted:
        failures.append(f"{ws}: {len(unrecorded)} Quotes have no quoted Job, e.g. {min(unrecorded)}")
    return failures + wallet_failures(wh, ws, rows, received, setup_quote)


def wallet_failures(wh: Warehouse, ws: str, rows: list[tuple[str, Decimal, str | None]],
                    received: dict[str, Decimal], setup_quote: str) -> list[str]:
    sums = {kind: sum((Decimal(a) for k, a, _ in rows if k == kind), Decimal(0))
            for kind in ("credit", "reservation", "charge", "refund")}
    settled = sum((Decimal(a) * (1 if k == "reservation" else -1) for k, a, q in rows
                   if q == setup_quote and k in ("reservation", "charge", "refund")), Decimal(0))
    balance = sums["credit"] - sums["charge"]
    reserved = sums["reservation"] - sums["charge"] - sums["refund"]
    state, entries = wallet.read(wh, ws)
    checks = {  # (what the Wallet says, what the rows summed here say)
        "credits": (sums["credit"], FUNDING),
        "balance": (state.balance, balance),
        "reserved": (state.reserved, reserved),
        "reserved = the live Quotes' amounts": (state.reserved, sum(received.values(), Decimal(0))),
        "available": (state.available, balance - reserved),
        "the setup Job's unspent reservation": (settled, Decimal(0)),
        "entries": (len(entries), len(rows)),
    }
    return [f"{ws}: {name}: Wallet {got}, expected {want}" for name, (got, want) in checks.items()
            if got != want]


# ---- the baseline --------------------------------------------------------------------------------------------

def in_process(wh: Warehouse, client: Client, n: int) -> dict[str, list[float]]:
    """Latencies of the same alternating mix, serially in this process, as the client's user (signed in, as the
    server holds them while an operation runs)."""
    actor = Actor(client.user, client.workspace)
    params = {"quote": QuoteRequest(**request(client.label).model_dump()), "results": JobRef(job_id=client.job_id)}
    ops = {"quote": "job_quote", "results": "job_results"}
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    signed_in = identity.SIGNED_IN.set(client.user)
    try:
        for i in range(n + len(KINDS)):
            kind = KINDS[i % len(KINDS)]
            t0 = time.perf_counter()
            call_local(wh, actor, ops[kind], params[kind])
            if i >= len(KINDS):  # the first of each warms this process's imports and caches
                times[kind].append(time.perf_counter() - t0)
    finally:
        identity.SIGNED_IN.reset(signed_in)
    return times


# ---- the report ----------------------------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (no interpolation: a p99 is a latency some request had)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(len(ordered) * q / 100) - 1))] if ordered else math.nan


def ms(values: list[float], q: float) -> float:
    return 1000 * percentile(values, q)


def describe(samples: list[Sample], wall: float) -> None:
    for kind in KINDS:
        times = [s.seconds for s in samples if s.kind == kind]
        print(f"  {kind:8s} {len(times):6d} requests, {len(times) / wall:6.1f}/s, p50 {ms(times, 50):7.1f} ms, "
              f"p99 {ms(times, 99):7.1f} ms, max {ms(times, 100):7.1f} ms")


def log_tail(log: Path, lines: int = 20) -> str:
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    return "\n".join(text[-lines:]) or "(the server logged nothing)"


@dataclass(frozen=True)
class Run:
    """One catalog's load: its rate, latencies, failures and (PostgreSQL only) the baseline and the fuzz."""

    catalog: str
    rate: float
    p99_ms: float
    errors: int  # requests not answered 200 with the record asked for
    ledger_failures: list[str]  # the ledger check's, per Workspace
    serial: float | None  # the in-process baseline's requests/s
    fuzz_cases: int | None
    failures: list[str]  # every reason the bench fails, these among them


@contextlib.contextmanager
def catalog(kind: str) -> Iterator[None]:
    """AMBER_CATALOG_URL for the block: a new database of a PostgreSQL server of the bench's own (Debian's, started
    as the tests start theirs: `tests/servers/postgres.py`), or unset for the DuckDB file under AMBER_HOME."""
    os.environ.pop("AMBER_CATALOG_URL", None)  # the bench's own catalog, never a configured one
    if kind == "duckdb":
        yield
        return
    if postgres.binaries() is None:
        raise SystemExit("PostgreSQL is not installed: run `make setup` (it installs Debian's postgresql).")
    with postgres.running() as server:
        os.environ["AMBER_CATALOG_URL"] = server.create_database("api_load")
        try:
            yield
        finally:
            os.environ.pop("AMBER_CATALOG_URL", None)


def run(kind: str, args: argparse.Namespace, fuzz_too: bool) -> Run:
    """Set up a fresh AMBER_HOME on the catalog ``kind``, serve it, load it, check it (and fuzz it)."""
    with catalog(kind), scratch_home(f"amber-bench-api-{kind}-", args.keep) as home:
        paths = AmberPaths.from_env()
        wh = Warehouse(paths)
        t0 = time.perf_counter()
        setup = set_up(wh, args.clients, args.workspaces)
        world = fuzz.populate(wh) if fuzz_too else None
        fuzzed_too = ", and the fuzz's two users" if fuzz_too else ""
        print(f"{kind}: setup of {args.clients} clients in {args.workspaces} Workspaces, each with a finished static "
              f"Job{fuzzed_too}, in {time.perf_counter() - t0:.1f} s")
        log = home / "server.log"
        fuzzed = None
        with serving(paths, log) as url:
            tallies, wall = load(url, setup.clients, args.seconds, args.max_requests)
            if world is not None:
                t0 = time.perf_counter()
                fuzzed = fuzz.fuzz(url, world, args.fuzz_examples, edges=not args.smoke)
                fuzz_s = time.perf_counter() - t0
        samples = [s for t in tallies for s in t.samples]
        answers = answer_failures(samples)
        ledger: list[str] = []
        for ws, setup_quote in setup.setup_quotes.items():
            received = {q: a for c, t in zip(setup.clients, tallies, strict=True) if c.workspace == ws
                        for q, a in t.quotes.items()}
            ledger += ledger_failures(wh, ws, received, setup_quote)
        quotes = sum(len(t.quotes) for t in tallies)
        errors = sum(s.status != 200 or s.problem is not None for s in samples)
        print(f"{kind}: {len(samples)} requests in {wall:.1f} s ({quotes} Quotes made), {errors} errors")
        describe(samples, wall)
        failures = [f"{kind}: {f}" for f in answers + ledger]
        if fuzzed is not None:
            print(f"{kind}: fuzz: {fuzzed.cases} cases over {len(fuzzed.asked)} operations in {fuzz_s:.1f} s, "
                  f"{len(fuzzed.failures)} failures")
            failures += [f"{kind}: fuzz {f}" for f in fuzzed.failures]
        serial = None
        if args.baseline_requests:
            times = in_process(wh, setup.clients[0], args.baseline_requests)
            serial = sum(len(v) for v in times.values()) / sum(sum(v) for v in times.values())
            print(f"{kind}: in-process, serial: quote p50 {ms(times['quote'], 50):.1f} ms, results p50 "
                  f"{ms(times['results'], 50):.1f} ms, {serial:.1f} requests/s")
        if failures:
            print(f"{kind}: server log (last lines):\n" + log_tail(log))
        return Run(kind, len(samples) / wall, ms([s.seconds for s in samples], 99), errors, ledger, serial,
                   None if fuzzed is None else fuzzed.cases, failures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--workspaces", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-requests", type=int, default=20_000)
    parser.add_argument("--baseline-requests", type=int, default=40, help="0: no in-process baseline")
    parser.add_argument("--fuzz-examples", type=int, default=fuzz.EXAMPLES,
                        help="drawn fuzz cases per operation, user and mode")
    parser.add_argument("--smoke", action="store_true", help="a small run, for the test suite")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.clients, args.workspaces, args.seconds, args.baseline_requests, args.fuzz_examples = 4, 2, 1.0, 2, 1
    hosted = run("postgresql", args, fuzz_too=True)
    default = run("duckdb", args, fuzz_too=False)
    failures = hosted.failures + default.failures
    print(f"FIGURE api_requests_per_s {hosted.rate:.1f} requests/s")
    print(f"FIGURE api_p99_ms {hosted.p99_ms:.0f} ms")
    print(f"FIGURE api_requests_per_s_duckdb {default.rate:.1f} requests/s")
    print(f"FIGURE api_p99_ms_duckdb {default.p99_ms:.0f} ms")
    print(f"FIGURE api_errors {hosted.errors + default.errors} requests")
    print(f"FIGURE api_ledger_mismatches {len(hosted.ledger_failures) + len(default.ledger_failures)} checks")
    if hosted.serial:
        print(f"FIGURE api_vs_inprocess_ratio {hosted.rate / hosted.serial:.2f} x")
    print(f"FIGURE api_fuzz_cases {hosted.fuzz_cases} cases")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        raise SystemExit(1)
    print("checks, on both catalogs: every answer 200 and the record asked for; one reservation per Quote, none lost "
          "or doubled; every Wallet equal to its ledger's sums; on PostgreSQL, every fuzzed answer as the document "
          "says")


if __name__ == "__main__":
    main()
