"""A Job launched from the Dagster UI is the signed-in user's, in a Workspace they belong to, and only once they
confirm its Quote (issue 27: "Every action is taken by a user, in a Workspace that user belongs to").

Findings: an operator launched `submit_job` from /ui and the Job was charged to `default` with `submitted_by` the
server's login, in one click; and /ui redirected to whatever Host header was sent.

The first tests run Amber's Dagster jobs in this process on a Dagster test instance, as the run worker would. The
others go through a real API server on loopback, with the Dagster UI mounted behind its sign-in as `amber serve`
mounts it and the instance's daemon launching the runs, and launch over GraphQL the way the Dagster UI does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from helpers import free_port, funded, request, stop_group

from amber_pipeline import embedded
from amber_pipeline.accounts import tokens, users, workspaces
from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.cli.client import tls
from amber_pipeline.definitions import defs
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle, records
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import show
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from server.__main__ import app
from server.dagster_ui import dagster_ui
from server.routes import create_app

STATIC = PROJECT_ROOT / "examples" / "static-bench"
# The tags the sign-in gate sets on each run it launches (amber_pipeline/accounts/launches.py), spelt out: what a
# browser might forge
LAUNCH_TAG, USER_TAG = "amber/launch", "amber/user"
TEAM, OPERATOR, OUTSIDER, MEMBER = "team", "otto", "pat", "mia"
PUBLIC_URL = "https://amber.example.com"  # named in redirects only: nothing is ever sent there
RUN_BUDGET_S = 120
JOB_BUDGET_S = 180
TERMINAL = ("SUCCESS", "FAILURE", "CANCELED")


def one_task_bench(tmp_path: Path) -> Path:
    """A static Benchmark of one Task, which the Direct Agent runs in a second with no sandbox."""
    bench = tmp_path / "one-static-bench"
    if not bench.exists():
        shutil.copytree(STATIC / "capital-city", bench / "capital-city")
    return bench


def submit_config(bench: Path, workspace: str) -> dict[str, Any]:
    return {"benchmark": str(bench), "agent": "direct", "model_configurations": ["replay-strong"],
            "workspace": workspace}


def shown(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    """What a submit_job or continue_job run showed: its step's output metadata, as the run's page shows it."""
    [output] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT]
    return {k: getattr(v, "value", v) for k, v in output.event_specific_data.metadata.items()}


def failure(result: dg.ExecuteInProcessResult) -> str:
    """The sentence a run failed with, as its page shows it."""
    [failed] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    return failed.event_specific_data.user_failure_data.description


def catalog(wh: Warehouse, query: str, params: list | None = None) -> list[tuple]:
    with wh.read() as con:
        return con.execute(query, params or []).fetchall()


def reservations(wh: Warehouse, workspace: str) -> list[tuple]:
    return catalog(wh, "select quote_id, amount from ledger where kind = 'reservation' and workspace = ? order by seq",
                   [workspace])


def audit_rows(wh: Warehouse, workspace: str) -> list[tuple]:
    return catalog(wh, "select user_name, action, job_id, quote_id from audit where workspace = ? order by seq",
                   [workspace])


# ---- the jobs themselves, in this process ---------------------------------------------------------------------------

@pytest.fixture
def instance(amber_home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def team(warehouse: Warehouse) -> Warehouse:
    """Workspace team of otto and mia (users of a hosted Amber, not staff), with a Credit; pat, in no Workspace."""
    for name in (OPERATOR, OUTSIDER, MEMBER):
        users.add(warehouse, name, "test")
    workspaces.create(warehouse, Actor(OPERATOR, None), TEAM)
    workspaces.add_member(warehouse, Actor(OPERATOR, TEAM), TEAM, MEMBER)
    wallet.add_credit(warehouse, Actor(local_user(), TEAM), TEAM, "10", "test credit")
    return warehouse


def launched(wh: Warehouse, user: str, forged: dict[str, str] | None = None) -> dict[str, str]:
    """A run's tags as the sign-in gate sets them for `user` (a launch id issued now), over what was `forged`."""
    from amber_pipeline.accounts import launches

    return {**(forged or {}), LAUNCH_TAG: launches.issue(wh, user), USER_TAG: user}


def run(instance: dg.DagsterInstance, job: str, op: str, config: dict[str, Any],
        tags: dict[str, str] | None = None) -> dg.ExecuteInProcessResult:
    return defs.resolve_job_def(job).execute_in_process(run_config={"ops": {op: {"config": config}}},
                                                        instance=instance, tags=tags, raise_on_error=False)


def test_submit_job_shows_the_quote_and_reserves_nothing_until_start_quote(
        tmp_path: Path, warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    """The embedded default (no sign-in: `amber ui` on the host): the local login acts, as on the CLI."""
    funded(warehouse)
    quoted = run(instance, "submit_job", "quote_job", submit_config(one_task_bench(tmp_path), DEFAULT_WORKSPACE))
    assert quoted.success
    assert records.list_jobs(warehouse, DEFAULT_WORKSPACE) == [] and reservations(warehouse, DEFAULT_WORKSPACE) == []
    quote = shown(quoted)
    assert quote["quote_id"].startswith("job-") and quote["shown_to"] == local_user()
    assert quote["estimate_usd"].startswith("$") and quote["ceiling_usd"] == quote["estimate_usd"]
    assert [r.data["cell"] for r in quote["cells"].records] == ["direct / replay-strong"]
    assert f"launch start_quote with quote_id {quote['quote_id']}" in quote["next_step"]

    started = run(instance, "start_quote", "confirm_quote", {"quote_id": quote["quote_id"]})
    assert started.success and started.output_for_node("confirm_quote") == quote["quote_id"]
    job = records.get_job(warehouse, quote["quote_id"], DEFAULT_WORKSPACE)
    assert job.status == "running"
    [(quote_id, amount)] = reservations(warehouse, DEFAULT_WORKSPACE)
    assert quote["ceiling_usd"] == show(amount) and Decimal(quote["quote"]["reserves"]) == amount  # as shown
    assert catalog(warehouse, "select submitted_by from jobs where id = ?", [job.id]) == [(local_user(),)]
    assert audit_rows(warehouse, DEFAULT_WORKSPACE)[-2:] == [(local_user(), "quote", job.id, quote_id),
                                                             (local_user(), "start", job.id, quote_id)]
    # Confirming again starts nothing more: the Job is made once under the Quote's id.
    again = run(instance, "start_quote", "confirm_quote", {"quote_id": quote["quote_id"]})
    assert again.success and len(reservations(warehouse, DEFAULT_WORKSPACE)) == 1


def test_a_run_acts_for_the_user_its_launch_id_was_issued_to(
        tmp_path: Path, team: Warehouse, instance: dg.DagsterInstance) -> None:
    forged = {USER_TAG: local_user()}  # the browser claims to be the server's login: the gate's tags win
    quoted = run(instance, "submit_job", "quote_job", submit_config(one_task_bench(tmp_path), TEAM),
                 tags=launched(team, OPERATOR, forged))
    assert quoted.success, failure(quoted)
    quote = shown(quoted)
    assert quote["shown_to"] == OPERATOR and instance.get_run_by_id(quoted.run_id).tags[USER_TAG] == OPERATOR
    started = run(instance, "start_quote", "confirm_quote", {"quote_id": quote["quote_id"]},
                  tags=launched(team, OPERATOR))
    assert started.success, failure(started)
    job_id = quote["quote_id"]
    assert catalog(team, "select workspace, submitted_by from jobs where id = ?", [job_id]) == [(TEAM, OPERATOR)]
    assert [(u, a) for u, a, _, _ in audit_rows(team, TEAM)] == [(local_user(), "credit"), (OPERATOR, "quote"),
                                                                  (OPERATOR, "start")]


def test_a_forged_or_copied_launch_id_is_refused(tmp_path: Path, team: Warehouse,
                                                 instance: dg.DagsterInstance) -> None:
    config = submit_config(one_task_bench(tmp_path), TEAM)
    made_up = run(instance, "submit_job", "quote_job", config, tags={LAUNCH_TAG: "launch-" + "0" * 32})
    assert not made_up.success
    assert failure(made_up) == ("This run's sign-in is not one Amber gave it (a re-execution carries its parent's): "
                                "launch it again from the Dagster UI's launchpad.")
    tags = launched(team, OPERATOR)
    assert run(instance, "submit_job", "quote_job", config, tags=tags).success
    copied = run(instance, "submit_job", "quote_job", config, tags=tags)  # as a re-execution copies its parent's
    assert not copied.success and failure(copied).startswith("This run's sign-in is not one Amber gave it")


def test_a_workspace_the_user_is_not_a_member_of_is_refused_in_one_sentence(
        tmp_path: Path, team: Warehouse, instance: dg.DagsterInstance) -> None:
    refused = run(instance, "submit_job", "quote_job", submit_config(one_task_bench(tmp_path), TEAM),
                  tags=launched(team, OUTSIDER))
    assert not refused.success
    assert failure(refused) == "No Workspace team among yours: see yours with `amber workspace list`."
    # Nor may a member of the embedded default's Workspace be charged by someone signed in: it is not theirs.
    funded(team)
    refused = run(instance, "submit_job", "quote_job", submit_config(one_task_bench(tmp_path), DEFAULT_WORKSPACE),
                  tags=launched(team, OPERATOR))
    assert failure(refused) == "No Workspace default among yours: see yours with `amber workspace list`."


def test_only_the_user_shown_a_quote_confirms_it_within_the_hour(
        tmp_path: Path, team: Warehouse, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    quote = shown(run(instance, "submit_job", "quote_job", submit_config(one_task_bench(tmp_path), TEAM),
                      tags=launched(team, OPERATOR)))
    other = run(instance, "start_quote", "confirm_quote", {"quote_id": quote["quote_id"]},
                tags=launched(team, MEMBER))
    assert failure(other) == (f"Quote {quote['quote_id']} was shown to {OPERATOR}, not to {MEMBER}: launch "
                              "submit_job yourself to see a Quote of your own.")
    unknown = run(instance, "start_quote", "confirm_quote", {"quote_id": "job-0000000000"},
                  tags=launched(team, OPERATOR))
    assert failure(unknown).startswith("No Quote job-0000000000 was shown")
    monkeypatch.setattr("amber_pipeline.jobs.quotes.LIFETIME", timedelta(0))
    late = run(instance, "start_quote", "confirm_quote", {"quote_id": quote["quote_id"]},
               tags=launched(team, OPERATOR))
    assert failure(late) == (f"Quote {quote['quote_id']} was shown more than an hour ago: launch submit_job again "
                             "to see a new one.")
    assert reservations(team, TEAM) == [] and records.list_jobs(team, TEAM) == []


def test_a_quote_above_the_amount_shown_is_refused_reserving_nothing(warehouse: Warehouse, tmp_path: Path) -> None:
    funded(warehouse)
    with pytest.raises(AmberError) as refused:
        lifecycle.submit(warehouse, DEFAULT_WORKSPACE, local_user(), request(str(one_task_bench(tmp_path)), "direct",
                                                                             ["replay-strong"]),
                         at_most=Decimal("0.000001"))
    assert str(refused.value).endswith("more than the $0.000001 you were shown: get a new Quote and confirm that one.")
    assert records.list_jobs(warehouse, DEFAULT_WORKSPACE) == [] and reservations(warehouse, DEFAULT_WORKSPACE) == []
    assert catalog(warehouse, "select count(*) from benchmark_versions") == [(0,)]  # the folder was not kept either


def test_continue_job_shows_what_it_would_reserve_and_start_quote_reserves_it(
        tmp_path: Path, team: Warehouse, instance: dg.DagsterInstance) -> None:
    quote = shown(run(instance, "submit_job", "quote_job", submit_config(one_task_bench(tmp_path), TEAM),
                      tags=launched(team, OPERATOR)))
    assert run(instance, "start_quote", "confirm_quote", {"quote_id": quote["quote_id"]},
               tags=launched(team, OPERATOR)).success
    job_id = quote["quote_id"]
    lifecycle.cancel(team, TEAM, job_id)  # (as the embedded default's user: this test's process)
    before = reservations(team, TEAM)

    priced = run(instance, "continue_job", "quote_continuation", {"workspace": TEAM, "job_id": job_id},
                 tags=launched(team, MEMBER))
    assert priced.success, failure(priced)
    going_on = shown(priced)
    assert going_on["quote_id"].startswith("quote-") and going_on["job"] == job_id
    assert reservations(team, TEAM) == before and records.get_job(team, job_id, TEAM).status == "cancelled"

    confirmed = run(instance, "start_quote", "confirm_quote", {"quote_id": going_on["quote_id"]},
                    tags=launched(team, MEMBER))
    assert confirmed.success, failure(confirmed)
    assert records.get_job(team, job_id, TEAM).status == "running"
    assert reservations(team, TEAM)[-1] == (going_on["quote_id"], Decimal(going_on["quote"]["reserves"]))
    assert audit_rows(team, TEAM)[-1] == (MEMBER, "continue", job_id, going_on["quote_id"])


# ---- through the server: sign-in, the gate, Dagster's own webserver and daemon ------------------------------------

LAUNCH = """
mutation Launch($executionParams: ExecutionParams!) {
  launchPipelineExecution(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
REEXECUTE = """
mutation Reexecute($reexecutionParams: ReexecutionParams) {
  launchPipelineReexecution(reexecutionParams: $reexecutionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}"""
INLINE = """
mutation {
  launchRun(executionParams: {selector: {repositoryLocationName: "amber", repositoryName: "__repository__",
                                         jobName: "submit_job"}}) { __typename }
}"""
RUN = "query($runId: ID!) { runOrError(runId: $runId) { ... on Run { status tags { key value } } } }"
LOCATIONS = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"


@contextlib.contextmanager
def served(app: FastAPI) -> Iterator[str]:
    """`app` on uvicorn on a free loopback port (its lifespan run, so it closes what it opened), as a URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on",
                                           ws="websockets-sansio"))
    thread = threading.Thread(target=server.run, name="amber-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@dataclass
class Server:
    url: str
    wh: Warehouse
    bench: Path

    @contextlib.contextmanager
    def signed_in(self, user: str) -> Iterator[httpx.Client]:
        """A browser's client, signed in to /ui with `user`'s token (a session cookie)."""
        secret = tokens.create(self.wh, user, name=f"{user} in a test").secret
        with httpx.Client(verify=tls(), base_url=self.url, timeout=60, trust_env=False) as client:
            assert client.post("/ui/signin", data={"token": secret}).status_code == 303
            yield client

    def launch(self, client: httpx.Client, job: str, op: str, config: dict[str, Any],
               tags: dict[str, str] | None = None) -> str:
        params = {"selector": {"repositoryLocationName": "amber", "repositoryName": "__repository__",
                               "jobName": job},
                  "runConfigData": {"ops": {op: {"config": config}}},
                  "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]}}
        launched = graphql(client, LAUNCH, {"executionParams": params})["launchPipelineExecution"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        return str(launched["run"]["runId"])


def graphql(client: httpx.Client, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    response = client.post("/ui/graphql", json={"query": query, "variables": variables or {}})
    assert response.status_code == 200, response.text
    body = response.json()
    assert "errors" not in body, body["errors"]
    return body["data"]


def wait(what: str, budget: float, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + budget
    while not (found := check()):
        assert time.monotonic() < deadline, f"no {what} within {budget} s"
        time.sleep(0.3)
    return found


def ended(client: httpx.Client, run_id: str) -> tuple[str, dict[str, str]]:
    """The run's end status and its tags, once it ended."""
    def done() -> tuple[str, dict[str, str]] | None:
        found = graphql(client, RUN, {"runId": run_id})["runOrError"]
        return ((found["status"], {t["key"]: t["value"] for t in found["tags"]})
                if found["status"] in TERMINAL else None)
    return wait(f"end of run {run_id}", RUN_BUDGET_S, done)


def step_outputs(run_id: str) -> dict[str, Any]:
    """The metadata of the run's step output, or its step's failure message under "failure"."""
    with dg.DagsterInstance.get() as instance:
        for event in instance.all_logs(run_id):
            if event.dagster_event is None:
                continue
            if event.dagster_event.event_type == dg.DagsterEventType.STEP_OUTPUT:
                return {k: getattr(v, "value", v) for k, v in event.dagster_event.step_output_data.metadata.items()}
            if event.dagster_event.event_type == dg.DagsterEventType.STEP_FAILURE:
                return {"failure": event.dagster_event.step_failure_data.user_failure_data.description}
    return {}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The API with the Dagster UI behind its sign-in, and the instance's daemon; Workspace team is the server
    login's (a staff user on the embedded default) and has otto and mia as members; otto and pat are operators."""
    root = tmp_path_factory.mktemp("ui-launch")
    home = root / "amber"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_HOME", str(home))
        mp.setenv("AMBER_CONFIG", str(root / "amber-config.toml"))
        paths = AmberPaths.from_env()
        for name, value in embedded.environment(paths).items():  # what the UI gives this process anyway
            mp.setenv(name, value)
        wh = Warehouse(paths)
        users.add(wh, OPERATOR, "test", roles=("staff", "operator"))
        users.add(wh, OUTSIDER, "test", roles=("staff", "operator"))
        users.add(wh, MEMBER, "test")
        workspaces.create(wh, Actor(local_user(), None), TEAM)  # the server's login is in it: it must not act
        for member in (OPERATOR, MEMBER):
            workspaces.add_member(wh, Actor(local_user(), TEAM), TEAM, member)
        wallet.add_credit(wh, Actor(local_user(), TEAM), TEAM, "10", "test credit")
        ui = dagster_ui(paths, wh)
        embedded.start_daemon(paths)
        try:
            with served(create_app(paths, ui=ui, on_close=ui.close)) as url:
                with httpx.Client(verify=tls(), base_url=url, timeout=60, trust_env=False) as probe:
                    secret = tokens.create(wh, OPERATOR, name="loading").secret
                    probe.headers["Authorization"] = f"Bearer {secret}"

                    def amber_loaded() -> bool:
                        entries = graphql(probe, LOCATIONS)["workspaceOrError"]["locationEntries"]
                        return any(e["name"] == "amber" and e["loadStatus"] == "LOADED" for e in entries)

                    wait("the amber code location", RUN_BUDGET_S, amber_loaded)
                yield Server(url, wh, one_task_bench(root))
        finally:
            embedded.stop_daemon(paths)


@pytest.mark.dagster_ui
def test_a_ui_launch_acts_for_the_signed_in_operator_and_only_quotes(server: Server) -> None:
    with server.signed_in(OPERATOR) as otto:
        forged = {USER_TAG: local_user(), LAUNCH_TAG: "launch-" + "f" * 32}
        run_id = server.launch(otto, "submit_job", "quote_job", submit_config(server.bench, TEAM), forged)
        status, tags = ended(otto, run_id)
        assert status == "SUCCESS", step_outputs(run_id)
        assert tags[USER_TAG] == OPERATOR and tags[LAUNCH_TAG] != forged[LAUNCH_TAG]
        assert catalog(server.wh, "select user_name, run_id from ui_launches where id = ?",
                       [tags[LAUNCH_TAG]]) == [(OPERATOR, run_id)]
        quote = step_outputs(run_id)
        job_id = quote["quote_id"]
        # Shown, not reserved: no Job, no reservation, until otto confirms.
        assert quote["shown_to"] == OPERATOR and quote["ceiling_usd"].startswith("$")
        assert catalog(server.wh, "select count(*) from jobs") == [(0,)] and reservations(server.wh, TEAM) == []

        start_id = server.launch(otto, "start_quote", "confirm_quote", {"quote_id": job_id})
        status, tags = ended(otto, start_id)
        assert status == "SUCCESS", step_outputs(start_id)
        assert tags[USER_TAG] == OPERATOR and tags["amber/job"] == job_id
    assert catalog(server.wh, "select workspace, submitted_by from jobs where id = ?", [job_id]) == [(TEAM, OPERATOR)]
    [(quote_id, amount)] = reservations(server.wh, TEAM)
    assert amount == Decimal(quote["quote"]["reserves"])
    assert [(u, a) for u, a, j, _ in audit_rows(server.wh, TEAM) if j == job_id] == [(OPERATOR, "quote"),
                                                                                      (OPERATOR, "start")]
    job = wait(f"Job {job_id} completed", JOB_BUDGET_S,
               lambda: (j := records.get_job(server.wh, job_id, TEAM)).ended and j)
    assert job.status == "completed", job


@pytest.mark.dagster_ui
def test_a_ui_launch_for_a_workspace_the_user_is_not_in_is_refused(server: Server) -> None:
    with server.signed_in(OUTSIDER) as pat:
        run_id = server.launch(pat, "submit_job", "quote_job", submit_config(server.bench, TEAM))
        status, tags = ended(pat, run_id)
    assert status == "FAILURE" and tags[USER_TAG] == OUTSIDER
    assert step_outputs(run_id) == {"failure": "No Workspace team among yours: see yours with `amber workspace "
                                               "list`."}
    assert OUTSIDER not in {u for u, *_ in audit_rows(server.wh, TEAM)}


@pytest.mark.dagster_ui
def test_a_reexecution_acts_for_who_asked_not_for_the_parent_runs_user(server: Server) -> None:
    with server.signed_in(OPERATOR) as otto:
        parent = server.launch(otto, "submit_job", "quote_job", submit_config(server.bench, TEAM))
        _, parent_tags = ended(otto, parent)
    with server.signed_in(OUTSIDER) as pat:
        again = graphql(pat, REEXECUTE, {"reexecutionParams": {"parentRunId": parent, "strategy": "ALL_STEPS"}})
        launched = again["launchPipelineReexecution"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        status, tags = ended(pat, launched["run"]["runId"])
    assert tags[USER_TAG] == OUTSIDER and tags[LAUNCH_TAG] != parent_tags[LAUNCH_TAG]
    assert status == "FAILURE"  # pat is no member of team: otto's sign-in did not pass to pat's run


@pytest.mark.dagster_ui
def test_a_launch_the_gate_cannot_tag_is_refused(server: Server) -> None:
    issued = catalog(server.wh, "select count(*) from ui_launches")
    with server.signed_in(OPERATOR) as otto:
        for response in (otto.post("/ui/graphql", json={"query": INLINE}),
                         otto.get("/ui/graphql", params={"query": INLINE}),
                         otto.post("/ui/graphql", content=INLINE, headers={"Content-Type": "application/graphql"})):
            assert response.status_code == 400, response.text
            [error] = response.json()["errors"]
            assert error["message"].startswith("A launch from the Dagster UI behind Amber's sign-in takes its "
                                               "parameters as GraphQL variables"), error
        assert graphql(otto, "{ version }")["version"]  # everything else passes as before
    assert catalog(server.wh, "select count(*) from ui_launches") == issued  # refused before any id is issued


def test_redirects_name_the_public_url_never_the_host_sent(amber_home: Path) -> None:
    sent = {"Host": "elsewhere.example"}
    with served(app(AmberPaths.from_env(), public_url=PUBLIC_URL + "/")) as url, \
            httpx.Client(verify=tls(), base_url=url, timeout=30, trust_env=False) as client:
        for path, target in (("/ui", "/ui/"), ("/docs/", "/docs"), ("/ui/", "/ui/signin")):
            response = client.get(path, headers={**sent, "Accept": "text/html"})
            assert response.is_redirect and response.headers["location"] == PUBLIC_URL + target, (path, response)
    with served(app(AmberPaths.from_env())) as url, \
            httpx.Client(verify=tls(), base_url=url, timeout=30, trust_env=False) as client:
        response = client.get("/ui", headers=sent)
        assert response.is_redirect and response.headers["location"] == "/ui/"  # no URL given: the path alone
    with pytest.raises(AmberError, match="is not the http"):
        app(AmberPaths.from_env(), public_url="elsewhere.example")


@pytest.mark.slow
@pytest.mark.dagster_ui
def test_amber_serve_names_its_public_url_in_redirects(amber_home: Path) -> None:
    """`amber serve --public-url URL`, the command an operator runs: /ui redirects to URL, whatever Host the
    request sent (the redirects themselves: test_redirects_name_the_public_url_never_the_host_sent)."""
    amber = str(Path(sys.executable).parent / "amber")
    host = {**os.environ, "AMBER_HOME": str(amber_home)}
    port = free_port()
    server = subprocess.Popen([amber, "serve", "--port", str(port), "--public-url", PUBLIC_URL + "/"], env=host,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        with httpx.Client(verify=tls(), base_url=f"http://127.0.0.1:{port}", timeout=30, trust_env=False) as client:

            def answers() -> bool:
                assert server.poll() is None, server.stderr.read() if server.stderr else server.returncode
                with contextlib.suppress(httpx.TransportError):
                    return client.get("/openapi.json").status_code == 200
                return False

            wait("amber serve answering", RUN_BUDGET_S, answers)
            response = client.get("/ui", headers={"Host": "elsewhere.example"})
        assert response.is_redirect and response.headers["location"] == PUBLIC_URL + "/ui/", response
    finally:
        stop_group(server)
