"""The hosted API as its users meet it: who may ask, and what another Workspace's objects look like.

A real server (the app `amber serve` runs, on uvicorn on loopback, `servers/api.py`) over a temporary
AMBER_HOME. alice's Workspace "alpha" holds one of everything (a Quote and its Job, an upload, a private
Benchmark Version, a Model Configuration, a token); bob works in "beta". Every operation the API offers is asked
for twice by bob: once naming alice's object, once naming one that does not exist; the two answers must be the
same status and the same body but for the name asked. An operation that names nothing is listed with the reason,
so a new endpoint without such a test fails `test_every_endpoint_is_covered`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import cli, free_port, ok, refusal, stop_group
from servers.api import ApiServer

from amber_pipeline.accounts import tokens, users, workspaces
from amber_pipeline.accounts.identity import Actor, local_user
from amber_pipeline.cli.client import tls
from amber_pipeline.jobs import lifecycle
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.models import configurations
from amber_pipeline.money import wallet
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from launcher import code_servers

STATIC = PROJECT_ROOT / "examples" / "static-bench"
MISSING = {"workspace": "nowhere", "job_id": "job-0123456789", "quote_id": "quote-0123456789",
           "upload_id": "upl-0123456789", "ref": "nothing-here@1", "name": "no-such-model",
           "token_id": "tok0123456789ab"}


@dataclass(frozen=True)
class World:
    wh: Warehouse
    server: ApiServer
    alice: str  # tokens
    bob: str
    ids: dict[str, str]  # alice's objects, by the field that names them
    tmp: Path


def archive_of(folder: Path, target: Path) -> Path:
    with tarfile.open(target, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return target


@contextlib.contextmanager
def made_world(wh: Warehouse, tmp: Path) -> Iterator[World]:
    """alice's "alpha" with one of everything, bob's "beta", and the server over them."""
    from amber_pipeline.benchmarks import uploads

    local = Actor(local_user(), None)
    users.add(wh, "alice", "tests")
    users.add(wh, "bob", "tests")
    workspaces.create(wh, Actor("alice", None), "alpha")
    workspaces.create(wh, Actor("bob", None), "beta")
    for ws in ("alpha", "beta"):
        wallet.add_credit(wh, local, ws, "100", "test credit")
    made = lifecycle.quote(wh, "alpha", "alice", JobRequest(benchmark=str(STATIC), agent="direct",
                                                            model_configurations=["replay-strong"]))
    upload = uploads.create(wh, "alpha", "alice", archive_of(STATIC, tmp / "alpha-bench.tar.gz"), "alpha-bench")
    mc = configurations.parse({"name": "alpha-model", "model": "replay-strong", "provider": "replay",
                               "replay": "replay-strong.json", "prices": {"input": 1.0, "cached_input": 0.1,
                                                                          "output": 2.0, "source": "a test"}},
                              "a test")
    configurations.add(wh.paths, "alpha", mc)
    alice = tokens.create(wh, "alice")
    server = ApiServer.start(wh.paths)
    try:
        yield World(wh, server, alice.secret, tokens.create(wh, "bob").secret,
                    {"workspace": "alpha", "job_id": made.job_id, "quote_id": made.id, "upload_id": upload.id,
                     "ref": made.benchmark_label, "name": "alpha-model", "token_id": alice.token.id}, tmp)
    finally:
        server.stop()


@pytest.fixture
def world(warehouse: Warehouse, tmp_path: Path) -> Iterator[World]:
    with made_world(warehouse, tmp_path) as made:
        yield made


@pytest.fixture(scope="module")
def refusing_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One world for the module's tests whose every request must be refused (each asserts its answers are 401,
    403 or 404), so none of them changes what the next one sees: made once, not once for each of the hundred
    operations they ask about."""
    tmp = tmp_path_factory.mktemp("api-world")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_HOME", str(tmp / "amber"))
        with made_world(Warehouse(AmberPaths.from_env()), tmp) as made:
            yield made


def ask(world: World, token: str | None, operation: str, workspace: str = "beta", /,
        files: dict[str, Path] | None = None, **fields: Any) -> httpx.Response:
    """One raw HTTP request for `operation`, its path values encoded as the CLI encodes them."""
    op = OPERATIONS[operation]
    path = op.path_for(workspace, fields)
    fields = {k: v for k, v in fields.items() if k not in op.path_fields}
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(verify=tls(), base_url=world.server.url, headers=headers, timeout=60) as http:
        if op.uploads:
            sent = {k: (p.name, p.read_bytes()) for k, p in (files or {}).items()}
            return http.request(op.method, path, files=sent or None, data={"params": json.dumps(fields)})
        if op.method == "GET":
            return http.request(op.method, path, params=fields)
        return http.request(op.method, path, json=fields)


# The params that make each operation reach its lookup (valid apart from whose the object is).
def valid_params(world: World) -> dict[str, dict[str, Any]]:
    label_request = {"benchmark": "static-bench@1", "agent": "direct", "model_configurations": ["replay-strong"]}
    return {
        "job_quote": label_request, "job_submit": label_request, "job_start": {"quote_id": MISSING["quote_id"]},
        "job_cancel": {"job_id": MISSING["job_id"]}, "job_status": {"job_id": MISSING["job_id"]},
        "job_continue": {"job_id": MISSING["job_id"]},
        "job_results": {"job_id": MISSING["job_id"]}, "job_list": {}, "audit_log": {},
        "wallet_read": {}, "workspace_show": {}, "workspace_provider_policy": {},
        "sql": {"query": "select 1"}, "model_list": {}, "model_show": {"name": "replay-strong"},
        "model_add": {"toml": 'name = "m"\nmodel = "m"\nprovider = "replay"\nreplay = "replay-strong.json"\n'
                              '[prices]\ninput = 1.0\ncached_input = 0.1\noutput = 2.0\nsource = "a test"\n'},
        "benchmark_list": {}, "benchmark_show": {"ref": "static-bench@1"},
        "benchmark_task": {"ref": "static-bench@1", "task": "capital-city"}, "job_preview": label_request,
        "job_tasks": {"job_id": MISSING["job_id"]}, "trial_detail": {"job_id": MISSING["job_id"], "trial": "x__1"},
        "benchmark_validation": {"upload_id": MISSING["upload_id"]},
        "benchmark_validate": {"upload_id": MISSING["upload_id"]},
        "benchmark_publish": {"upload_id": MISSING["upload_id"]},
        "benchmark_upload": {"name": "b", "archive": "bench.tar.gz"},
        "benchmark_adapt": {"kind": "gsm8k", "name": "g", "file": "gsm8k.jsonl"},
        "benchmark_review": {"model": "replay-strong", "folder": "static-bench.tar.gz"},
        "benchmark_import": {"registry": "https://example.invalid/registry.json", "dataset": "d@1"},
        "report": {"source": MISSING["job_id"]},
        "compare": {"baseline": MISSING["job_id"], "candidates": [MISSING["job_id"]], "routes": [None, None],
                    "names": ["candidate"], "baseline_name": "baseline"},
        "leaderboard": {"source": MISSING["job_id"],
                        "rows": [{"agent": "a", "model": "m", "pass_rate": 50, "trials_per_task": 1}]},
        "judge": {"source": MISSING["job_id"], "model": "replay-strong"},
    }


# Operations that act in a Workspace: bob names alice's "alpha", then "nowhere".
ACTING = sorted(name for name, op in OPERATIONS.items() if op.where == "acting")

# Operations that name one of alice's objects (in bob's own Workspace when they act in one): the field, and
# the params around it.
BY_ID: dict[str, tuple[str, dict[str, Any]]] = {
    "job_start": ("quote_id", {}),
    "job_cancel": ("job_id", {}), "job_status": ("job_id", {}), "job_results": ("job_id", {}),
    "job_continue": ("job_id", {}),
    "report": ("job_id", {}), "compare": ("job_id", {}), "leaderboard": ("job_id", {}), "judge": ("job_id", {}),
    "benchmark_validation": ("upload_id", {}), "benchmark_validate": ("upload_id", {}),
    "benchmark_publish": ("upload_id", {}),
    "benchmark_show": ("ref", {}), "job_quote": ("ref", {}), "job_submit": ("ref", {}), "job_preview": ("ref", {}),
    "benchmark_task": ("ref", {"task": "capital-city"}),
    "job_tasks": ("job_id", {}), "trial_detail": ("job_id", {"trial": "capital-city__1"}),
    "model_show": ("name", {}), "benchmark_review": ("name", {}),
    "workspace_add_member": ("workspace", {"user": "carol"}), "token_revoke": ("token_id", {}),
    "credit_add": ("workspace", {"amount": "1", "reason": "x"}),
}

# Operations that name nothing of anyone's, and what they show bob instead.
NAMES_NOTHING = {
    "whoami": "who bob is", "workspace_list": "bob's Workspaces (test_lists_show_nothing_of_another_workspace)",
    "workspace_create": "a new name; Workspace names are unique across the instance, so a taken one is refused",
    "user_list": "staff only", "user_add": "staff only", "token_create": "bob's own token (another's: staff only)",
    "token_list": "bob's tokens (test_lists_show_nothing_of_another_workspace)",
}


def test_every_endpoint_is_covered() -> None:
    covered = set(ACTING) | set(BY_ID) | set(NAMES_NOTHING)
    assert covered == set(OPERATIONS), sorted(set(OPERATIONS) ^ covered)


def same_answer(other: httpx.Response, other_id: str, missing: httpx.Response, missing_id: str) -> None:
    assert other.status_code == missing.status_code, (other.text, missing.text)
    assert other.status_code in (401, 403, 404), other.text  # refused, not served
    assert other.text.replace(other_id, "<id>") == missing.text.replace(missing_id, "<id>")
    assert other_id not in missing.text


def upload_files(world: World, name: str) -> dict[str, Path]:
    """The files an upload operation brings (made in the test's folder)."""
    if name == "benchmark_upload":
        return {"archive": archive_of(STATIC, world.tmp / "bench.tar.gz")}
    if name == "benchmark_adapt":
        data = world.tmp / "gsm8k.jsonl"
        data.write_text(json.dumps({"question": "1+1?", "answer": "2\n#### 2"}) + "\n")
        return {"file": data}
    if name == "benchmark_review":
        return {"folder": archive_of(STATIC, world.tmp / "static-bench.tar.gz")}
    return {}


@pytest.mark.parametrize("name", ACTING)
def test_another_workspace_answers_as_a_missing_one(refusing_world: World, name: str) -> None:
    params = valid_params(refusing_world)[name]
    files = upload_files(refusing_world, name)
    other = ask(refusing_world, refusing_world.bob, name, "alpha", files=files, **dict(params))
    missing = ask(refusing_world, refusing_world.bob, name, "nowhere", files=files, **dict(params))
    same_answer(other, "alpha", missing, "nowhere")
    assert other.status_code == 404 and "No Workspace alpha among yours" in other.json()["detail"]


@pytest.mark.parametrize("name", sorted(BY_ID))
def test_another_workspaces_object_answers_as_a_missing_one(refusing_world: World, name: str) -> None:
    kind, extra = BY_ID[name]
    params = {**valid_params(refusing_world).get(name, {}), **extra}
    files = upload_files(refusing_world, name)
    alices, made_up = refusing_world.ids[kind], MISSING[kind]

    def named(value: str) -> dict[str, Any]:
        if name in ("job_quote", "job_submit", "job_preview"):
            return {**params, "benchmark": value}
        if name == "benchmark_review":
            return {**params, "model": value}
        if name in ("report", "leaderboard", "judge"):
            return {**params, "source": value}
        if name == "compare":
            return {**params, "baseline": value, "candidates": [value]}
        if name in ("workspace_add_member",):
            return {**params, "name": value}
        return {**params, kind: value}

    workspaces_asked = (alices, made_up) if name == "credit_add" else ("beta", "beta")
    other = ask(refusing_world, refusing_world.bob, name, workspaces_asked[0], files=files, **named(alices))
    missing = ask(refusing_world, refusing_world.bob, name, workspaces_asked[1], files=files, **named(made_up))
    same_answer(other, alices, missing, made_up)


def test_alices_own_objects_answer_her(world: World) -> None:
    """The same requests as alice's: her objects are served, so the refusals above are about whose they are."""
    assert ask(world, world.alice, "job_status", "alpha", job_id=world.ids["job_id"]).status_code == 200
    assert ask(world, world.alice, "model_show", "alpha", name="alpha-model").status_code == 200
    assert ask(world, world.alice, "benchmark_validation", "alpha", upload_id=world.ids["upload_id"]).is_success
    assert ask(world, world.alice, "benchmark_show", "alpha", ref=world.ids["ref"]).is_success


def test_lists_show_nothing_of_another_workspace(world: World) -> None:
    shown = {name: ask(world, world.bob, name).text for name in ("job_list", "benchmark_list", "model_list",
                                                                    "wallet_read")}
    shown["workspace_list"] = ask(world, world.bob, "workspace_list").text
    shown["token_list"] = ask(world, world.bob, "token_list").text
    shown["sql"] = ask(world, world.bob, "sql", query="select * from jobs union all select * from jobs").text
    for name, text in shown.items():
        for alices in (world.ids["job_id"], world.ids["upload_id"], "alpha-model", "alpha", world.ids["token_id"]):
            assert alices not in text, (name, alices)


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_without_a_valid_token_every_endpoint_refuses(refusing_world: World, name: str) -> None:
    params = valid_params(refusing_world).get(name, {})
    params = {**{f: MISSING.get(f, "x") for f in OPERATIONS[name].path_fields}, **params}
    revoked = tokens.create(refusing_world.wh, "bob")
    tokens.revoke(refusing_world.wh, "bob", revoked.token.id)
    expired = tokens.create(refusing_world.wh, "bob")
    with refusing_world.wh.write() as con:
        con.execute("update api_tokens set expires_at = now() - interval 1 second where id = ?", [expired.token.id])
    forged = refusing_world.bob[:-4] + "AAAA"
    answers = [ask(refusing_world, token, name, **dict(params)) for token in (None, "", revoked.secret, expired.secret,
                                                                     forged, "amber_tok0_x")]
    assert {a.status_code for a in answers} == {401}
    assert {a.json()["detail"] for a in answers} == {tokens.REFUSED}


def test_tokens_are_stored_as_hashes_and_shown_once(world: World) -> None:
    env = {"AMBER_URL": world.server.url, "AMBER_TOKEN": world.bob}
    made = ok(cli("token", "create", "--name", "laptop", env=env))
    secret = made.splitlines()[0]
    assert secret.startswith("amber_tok")
    with world.wh.read() as con:
        stored = con.execute("select * from api_tokens").fetchall()
    assert not any(secret in str(row) for row in stored)  # only its hash
    listed = ok(cli("token", "list", env=env))
    assert "laptop" in listed and secret not in listed and "active" in listed


def test_two_apps_in_one_process_each_answer_from_their_own_instance(tmp_path: Path) -> None:
    """A process makes the operations' routes once and every app it makes shares them: each app still answers from
    its own instance, and a token of one instance means nothing to another."""
    servers, secrets = [], []
    for name, roles in (("a", ("staff", "operator")), ("b", ())):
        wh = Warehouse(AmberPaths(tmp_path / name))
        users.add(wh, "alice", "tests", roles)
        if name == "a":
            users.add(wh, "carol", "tests")
        secrets.append(tokens.create(wh, "alice").secret)
        servers.append(ApiServer.start(wh.paths))
    try:
        (a, b), (on_a, on_b) = servers, secrets

        def get(server: ApiServer, path: str, secret: str) -> httpx.Response:
            return httpx.get(f"{server.url}/v1/{path}", headers={"Authorization": f"Bearer {secret}"})

        assert get(a, "me", on_a).json() == {"user": "alice", "staff": True, "operator": True}
        assert get(b, "me", on_b).json() == {"user": "alice", "staff": False, "operator": False}
        assert sorted(u["name"] for u in get(a, "users", on_a).json()) == ["alice", "carol"]
        assert get(b, "users", on_b).status_code == 403
        assert get(b, "me", on_a).status_code == get(a, "me", on_b).status_code == 401
    finally:
        for server in servers:
            server.stop()


def test_the_openapi_document_describes_every_operation(world: World) -> None:
    document = httpx.get(f"{world.server.url}/openapi.json").json()
    for op in OPERATIONS.values():
        described = document["paths"][op.route][op.method.lower()]
        assert described["summary"] == op.summary
        assert {"401", "403", "404"} <= set(described["responses"])


# ---- the CLI as the API's client ----------------------------------------------------------------------------

def test_user_is_refused_against_a_server(world: World) -> None:
    env = {"AMBER_URL": world.server.url, "AMBER_TOKEN": world.bob}
    sentence = refusal(cli("--user", "alice", "--workspace", "alpha", "wallet", env=env))
    assert sentence.startswith("--user is for the embedded default only")


def test_login_keeps_the_token_where_only_its_owner_reads_it(world: World, tmp_path: Path) -> None:
    shown = ok(cli("login", "--url", world.server.url, "--token", world.bob))
    assert "as bob" in shown
    token_file = Path(os.environ["AMBER_CONFIG"]).parent / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert ok(cli("whoami")).strip() == "bob"  # the saved URL and token: no environment needed
    token_file.chmod(0o644)
    assert "can be read by other users" in refusal(cli("whoami"))
    token_file.chmod(0o600)
    tokens.revoke(world.wh, "bob", tokens.verify(world.wh, world.bob).id)
    assert refusal(cli("whoami")) == tokens.REFUSED
    ok(cli("logout"))
    assert not token_file.exists()


def test_a_bad_login_keeps_nothing(world: World) -> None:
    assert refusal(cli("login", "--url", world.server.url, "--token", "amber_nope")) == tokens.REFUSED
    assert not (Path(os.environ["AMBER_CONFIG"]).parent / "token").exists()


# ---- a second user, through `amber serve` only --------------------------------------------------------------

def amber_process(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "amber_pipeline.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.dagster_ui
def test_a_second_user_uses_amber_only_through_the_api(tmp_path: Path, amber_home: Path) -> None:
    """`amber serve` owns the instance; staff are made on its host; bob signs in from a home of his own (no
    AMBER_HOME of the instance, no access to its files) and runs a Job to its results through the API alone."""
    host = {**os.environ, "AMBER_HOME": str(amber_home)}
    ok_run = amber_process("user", "add", "alice", "--staff", env=host)
    assert ok_run.returncode == 0, ok_run.stderr
    assert amber_process("user", "add", "bob", env=host).returncode == 0
    alice = amber_process("token", "create", "--for", "alice", env=host).stdout.splitlines()[0]
    bob = amber_process("token", "create", "--for", "bob", "--days", "1", env=host).stdout.splitlines()[0]
    server, url = serve(host)
    try:
        as_alice = client_env(tmp_path / "alice", url)
        as_bob = client_env(tmp_path / "bob", url)
        for who, token in ((as_alice, alice), (as_bob, bob)):
            signed = amber_process("login", "--token", token, env=who)
            assert signed.returncode == 0, signed.stderr
        assert amber_process("workspace", "create", "alpha", env=as_alice).returncode == 0
        assert amber_process("--workspace", "alpha", "credit", "add", "--amount", "5", "--reason", "t",
                             env=as_alice).returncode == 0
        assert amber_process("workspace", "create", "beta", env=as_bob).returncode == 0
        credited = amber_process("--workspace", "beta", "credit", "add", "--amount", "5", "--reason", "t",
                                 env=as_bob)
        assert credited.returncode == 1 and "bob is not staff" in credited.stderr
        assert amber_process("--workspace", "beta", "credit", "add", "--amount", "5", "--reason", "t",
                             env=as_alice).returncode == 0
        assert amber_process("workspace", "use", "beta", env=as_bob).returncode == 0
        done = amber_process("job", "submit", str(STATIC), "--agent", "direct", "--model", "replay-strong",
                             "--wait", env=as_bob)
        assert done.returncode == 0, done.stderr
        assert "Started job-" in done.stdout and "replay-strong" in done.stdout
        job_id = done.stdout.split("Started ", 1)[1].split(".", 1)[0]
        results = json.loads(amber_process("results", job_id, "--json", env=as_bob).stdout)
        assert results["status"] == "completed" and results["cells"], results
        assert amber_process("results", job_id, env=as_alice).returncode == 1  # not hers: as missing
        hidden = amber_process("--workspace", "alpha", "wallet", env=as_bob)
        assert hidden.stderr.strip() == "amber: No Workspace alpha among yours: see yours with `amber workspace list`."
        assert "alpha" not in amber_process("workspace", "list", env=as_bob).stdout
        jobs = amber_process("sql", "select workspace from jobs", env=as_bob).stdout
        assert "beta" in jobs and "alpha" not in jobs
        assert not any(str(amber_home) in v for v in as_bob.values())
    finally:
        stop_group(server)



@pytest.mark.slow
@pytest.mark.dagster_ui
@pytest.mark.parametrize("stop", ["SIGTERM", "Ctrl-C"])
def test_amber_serve_stops_with_everything_it_started(amber_home: Path, stop: str) -> None:
    """Stopped as a service manager stops it (SIGTERM to it) or at its terminal (Ctrl-C: SIGINT to its process
    group), `amber serve` has stopped every process it started by the time it exits: the daemon, the warm worker,
    the API, and the code servers of the daemon and of its Dagster UI, which the warm worker forked (which would
    otherwise live until their heartbeat runs out)."""
    host = {**os.environ, "AMBER_HOME": str(amber_home)}
    assert amber_process("user", "add", "stella", "--staff", env=host).returncode == 0
    token = amber_process("token", "create", "--for", "stella", env=host).stdout.splitlines()[0]
    server, url = serve(host)
    try:
        shown = httpx.post(f"{url}/ui/graphql", json={"query": "{ version }"}, timeout=120,
                           headers={"Authorization": f"Bearer {token}"})
        assert shown.status_code == 200, shown.text
        started = descendants(server.pid)
        assert sum(name(pid) == code_servers.NAME for pid in started) == 2, started  # the daemon's and the UI's
        if stop == "SIGTERM":
            os.kill(server.pid, signal.SIGTERM)
        else:
            os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=60)
        time.sleep(1)  # a process killed at the end may wait a moment for init to reap it
        assert not {pid: command for pid, command in started.items() if running(pid)}
    finally:
        stop_group(server)


def descendants(root: int) -> dict[int, bytes]:
    """The processes `root` started and their children, with their command lines, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError):
                continue
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    commands = {}
    for pid in found:
        with contextlib.suppress(OSError):
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    return commands


def name(pid: int) -> bytes:
    """The process's name (/proc/PID/comm); b"" once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_bytes().strip()
    except OSError:
        return b""


def running(pid: int) -> bool:
    """Whether the process runs (a zombie, ended but not reaped yet, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def serve(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """`amber serve` on a free loopback port, as an operator starts it, once it answers; and its URL."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "amber_pipeline.cli", "serve", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, server)
    except BaseException:
        stop_group(server)
        raise
    return server, url


def wait_until_up(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stderr.read() if server.stderr else ""
        try:
            if httpx.get(f"{url}/openapi.json", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("amber serve did not answer within 60 s")


def client_env(home: Path, url: str) -> dict[str, str]:
    """A user's own environment: their home and config, no AMBER_HOME of the instance (an empty one of theirs)."""
    home.mkdir(parents=True)
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV")}
    return {**keep, "HOME": str(home), "AMBER_CONFIG": str(home / ".config" / "amber" / "config.toml"),
            "AMBER_HOME": str(home / "no-instance"), "AMBER_URL": url}


def test_a_path_value_travels_whole(world: World) -> None:
    """A name with '/', '..' or '%' reaches the server as typed (encoded twice), never another route."""
    for odd in ("a/b", "..", ".", "%2F", "x?y#z"):
        answer = ask(world, world.bob, "job_status", job_id=odd)
        assert answer.status_code == 404 and f"No Job {odd} in Workspace beta" in answer.json()["detail"], odd


def test_paths_of_the_server_are_not_benchmarks(world: World) -> None:
    """A signed-in user names a folder only by sending it: a path of the server's host reads as missing."""
    answer = ask(world, world.bob, "job_quote", benchmark=str(STATIC), agent="direct",
                 model_configurations=["replay-strong"])
    assert answer.status_code == 400 and answer.json()["detail"].startswith(f"No Benchmark at {STATIC}")
    forged = ask(world, world.bob, "job_quote", files={}, benchmark="x", folder=str(STATIC), agent="direct",
                 model_configurations=["replay-strong"])
    assert forged.status_code == 400  # a "folder" field is never a path: only a file sent with the request


def test_a_malformed_at_most_is_refused_naming_at_most(world: World) -> None:
    """`at_most` is set by pages, not typed at the CLI, so its refusal names the field, not a CLI option."""
    for operation in ("job_quote", "job_submit"):
        answer = ask(world, world.bob, operation, benchmark="x", agent="direct", model_configurations=["replay-strong"],
                     at_most="12,5")
        assert answer.status_code == 400 and answer.json()["detail"].startswith('"12,5" is not an amount for at_most:')



def test_a_request_past_the_size_limit_is_refused_before_it_is_spooled(warehouse: Warehouse, tmp_path: Path) -> None:
    users.add(warehouse, "bob", "tests")
    secret = tokens.create(warehouse, "bob").secret
    server = ApiServer.start(warehouse.paths, max_request_bytes=1 << 20)
    try:
        big = tmp_path / "big.tar.gz"
        big.write_bytes(os.urandom(2 << 20))
        with httpx.Client(verify=tls(), base_url=server.url, headers={"authorization": f"Bearer {secret}"}) as http:
            answer = http.post("/v1/workspaces/~/uploads", files={"archive": (big.name, big.read_bytes())},
                               data={"params": json.dumps({"name": "big"})})
        assert answer.status_code == 413 and answer.json()["detail"].startswith("The request is larger than 1 MB")
    finally:
        server.stop()


@pytest.mark.parametrize(("setting", "refused"), [
    ('replay = "/etc/passwd"', "is a file outside Amber's own"),
    ('replay = "../../../../etc/passwd"', "is a file outside Amber's own"),
    ('base_url = "https://api.example.com/v1"\nkey_env = "ANTHROPIC_API_KEY"', "would send a variable of the server"),
    ('base_url = "http://api.example.com/v1"', "is not an https URL of a public host"),
    ('base_url = "https://127.0.0.1:8443/v1"', "is not an https URL of a public host"),
    ('base_url = "https://10.1.2.3/v1"', "is not an https URL of a public host"),
    ('base_url = "https://[::1]/v1"', "is not an https URL of a public host"),
    ('base_url = "https://db/v1"', "is not an https URL of a public host"),
    ('base_url = "https://metadata.google.internal/v1"', "is not an https URL of a public host"),
])
def test_a_model_configuration_asks_nothing_of_the_servers_files_keys_or_network(world: World, setting: str,
                                                                                  refused: str) -> None:
    provider = "replay" if setting.startswith("replay") else "openai-compatible"
    toml = (f'name = "mine"\nmodel = "m"\nprovider = "{provider}"\n{setting}\n'
            '[prices]\ninput = 1.0\ncached_input = 0.1\noutput = 2.0\nsource = "a test"\n')
    answer = ask(world, world.bob, "model_add", toml=toml)
    assert answer.status_code == 400 and refused in answer.json()["detail"], answer.text
    public = toml.replace(setting, 'base_url = "https://api.example.com/v1"').replace('"replay"', '"openai-compatible"')
    assert ask(world, world.bob, "model_add", toml=public).status_code == 200  # a public https endpoint, no key
