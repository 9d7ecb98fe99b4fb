"""The installed Agents end to end: Claude Code, Codex CLI, pi and mini-swe-agent in the sandbox, through the proxy.

Each runs a demo Task in a real Docker sandbox whose image carries the Agent's real software (built from its
registry once, then cached by content), on a sandbox network that reaches only the model proxy, which forwards
its calls to the provider double standing in for Anthropic or OpenAI. The double answers replay-strong's script
for the Task as tool calls in each Agent's own protocol, so the Agent really runs the commands and the Verifier
judges the end state. A user would check: the Reward, the charge in the ledger against the metered tokens at
the catalog's prices, the transcript of every call, and that the Provider saw the real key and never the Trial
token (and the Agent never the real key).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json
import secrets
import shutil
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from helpers import cli, funded, refusal, request, trial_sandboxes

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.agents.specs import AGENTS
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import cell_run, lifecycle
from amber_pipeline.jobs.records import cells_of, get_job
from amber_pipeline.models.provider_double import ProviderDouble, load_replay
from amber_pipeline.money.prices import PRICES
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.sandbox import agent_image, docker_engine
from amber_pipeline.warehouse.catalog import Warehouse

pytestmark = pytest.mark.docker

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
STRONG = PROJECT_ROOT / "examples" / "replays" / "replay-strong.json"
CATALOG = PROJECT_ROOT / "amber_pipeline" / "models" / "catalog.toml"
TASK = "count-log-errors"  # replay-strong solves it in two commands: look, then write the report
WS = DEFAULT_WORKSPACE

# (Agent, catalog Model Configuration, the model id it sends, the wire its calls must use)
CASES = [
    ("claude-code", "claude-haiku-4.5", "claude-haiku-4-5", "messages"),
    ("codex", "gpt-5-mini", "gpt-5-mini", "responses"),
    ("pi", "gpt-5-mini", "gpt-5-mini", "chat"),
    ("pi", "claude-haiku-4.5", "claude-haiku-4-5", "messages"),
    ("mini-swe-agent", "gpt-5-mini", "gpt-5-mini", "chat"),
    ("mini-swe-agent", "claude-haiku-4.5", "claude-haiku-4-5", "messages"),
]


@pytest.fixture(scope="module", autouse=True)
def agent_images() -> None:
    """The four software images, built side by side before the first test needs one (their downloads overlap:
    on a bare machine about a minute for all, against two and a half one after another). Built here rather than
    in the background of the whole suite, whose timing-sensitive tests a busy machine would upset. A build that
    fails here is left to the test that needs it, which reports why."""
    client = docker_engine.connect()
    installed = [a for a in AGENTS.values() if a.software is not None]
    with ThreadPoolExecutor(len(installed)) as pool:
        for spec in installed:
            pool.submit(agent_image.software_image, client, spec.name, spec.software)


@pytest.fixture
def double(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ProviderDouble, str, Path]]:
    """A double for Anthropic and OpenAI answering replay-strong's script for TASK, demanding a key."""
    bench = tmp_path / "bench"
    shutil.copytree(DEMO / TASK, bench / TASK)
    script = json.loads(STRONG.read_text())["tasks"][TASK]
    replays = []
    for model in {m for _, _, m, _ in CASES}:
        path = tmp_path / f"{model}.json"
        path.write_text(json.dumps({"model": model, "tasks": {TASK: script}}))
        replays.append(load_replay(path))
    key = f"sk-amber-test-KEY-{secrets.token_hex(16)}"
    monkeypatch.setenv("AMBER_SECRETS_FILE", str(tmp_path / "no-secrets.env"))
    with ProviderDouble(replays, {TASK: (bench / TASK / "instruction.md").read_text().strip()}, api_key=key) as d:
        for provider in ("ANTHROPIC", "OPENAI"):
            monkeypatch.setenv(f"{provider}_API_KEY", key)
            monkeypatch.setenv(f"AMBER_{provider}_BASE_URL", d.base_url)
        yield d, key, bench


def rows(wh: Warehouse, query: str, params: list[Any]) -> list[dict[str, Any]]:
    with wh.query(WS) as con:
        cursor = con.execute(query, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def catalog_cost(mc: str, input_tokens: int, cached: int, output: int) -> Decimal:
    """The catalog's prices (read from its TOML here, not through Amber), in the ledger's micro-dollars."""
    prices = next(t["prices"] for t in tomllib.loads(CATALOG.read_text())["configuration"] if t["name"] == mc)
    dollars = (Decimal(str(prices["input"])) * (input_tokens - cached) + Decimal(str(prices["cached_input"])) * cached
               + Decimal(str(prices["output"])) * output) / 1_000_000
    return dollars.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)


@pytest.mark.slow
@pytest.mark.parametrize(("agent", "mc", "model", "wire"), CASES, ids=[f"{a}-{w}" for a, _, _, w in CASES])
def test_an_installed_agent_solves_a_demo_task_through_the_proxy(
        agent: str, mc: str, model: str, wire: str, double: tuple[ProviderDouble, str, Path],
        warehouse: Warehouse) -> None:
    d, key, bench = double
    funded(warehouse, WS, "20")
    _, job = lifecycle.submit(warehouse, WS, local_user(), request(str(bench), agent, [mc]))
    for cell in cells_of(warehouse, job.id):
        cell_run.run_cell_of_job(warehouse, job.id, cell.cell_key)
    assert get_job(warehouse, job.id, WS).status == "completed"

    (trial,) = rows(warehouse, "select * from trials where job_id = ?", [job.id])
    assert (trial["outcome"], trial["reward"], trial["retries"]) == ("scored", 1.0, 0), trial["error_message"]
    calls = rows(warehouse, "select * from transcripts where job_id = ? order by seq", [job.id])
    # replay-strong's two commands as tool calls, then the end of the run: three calls, all metered.
    assert len(calls) == trial["model_calls"] == 3
    assert all(c["status"] == 200 and c["wire"] == wire for c in calls)
    assert key not in json.dumps([c["request"] for c in calls] + [c["response"] for c in calls])
    tokens = [sum(c[k] for c in calls) for k in ("input_tokens", "cached_input_tokens", "output_tokens")]
    assert [trial["input_tokens"], trial["cached_input_tokens"], trial["output_tokens"]] == tokens
    assert tokens[0] > 0 and tokens[2] > 0
    # Charged: the metered tokens at the catalog's prices, plus the sandbox's time at its hourly rate.
    (charged,) = rows(warehouse, "select amount from ledger where kind = 'charge' and job_id = ?", [job.id])
    sandbox = Decimal(str(trial["duration_sec"])) / 3600 * PRICES.sandbox_usd_per_hour
    assert abs(charged["amount"] - catalog_cost(mc, *tokens) - sandbox) <= Decimal("0.000001")
    assert Decimal(str(trial["cost_usd"])) == charged["amount"]

    # The Provider saw the calls with the real key, and never the Trial token.
    received = [r for r in d.received if r.body.get("model") == model]
    assert len(received) == 3
    for r in received:
        assert r.path == f"/v1/{'chat/completions' if wire == 'chat' else wire}"
        assert (r.headers.get("x-api-key") or r.headers.get("authorization", "").removeprefix("Bearer ")) == key
        assert "amber-trial-" not in json.dumps(r.headers) + json.dumps(r.body)

    # The Trial ran in the Agent's layer on the Task's image, and its Agent Version says so.
    image = docker_engine.connect().images.get(trial["image_id"])
    assert any(tag.startswith(f"amber-agent:{agent}-") for tag in image.tags), image.tags
    spec = AGENTS[agent]
    assert trial["agent_version"] == spec.agent_version(trial["image_id"]) != spec.agent_version(None)


@pytest.mark.parametrize(("agent", "model", "allowed"), [("claude-code", "gpt-5", "anthropic"),
                                                         ("codex", "claude-sonnet-4.6", "openai")])
def test_an_agent_tied_to_a_provider_is_refused_with_another_at_quote_time(
        agent: str, model: str, allowed: str, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    funded(warehouse, WS, "20")
    message = refusal(cli("job", "quote", str(DEMO), "--agent", agent, "--model", model))
    assert message.startswith(f"{agent} runs only with {allowed} Model Configurations, and {model} is ")
    with warehouse.query(WS) as con:
        assert con.execute("select kind from ledger").fetchall() == [("credit",)]  # nothing reserved
        assert con.execute("select count(*) from jobs").fetchone() == (0,)


def test_software_that_cannot_be_installed_is_one_sentence() -> None:
    client = docker_engine.connect()
    failing = {"Dockerfile": b"FROM amber-base:bookworm\nRUN echo 'npm error 404 Not Found - pi@9.9.9' && false\n"}
    with pytest.raises(AmberError) as caught:
        agent_image._build(client, f"amber-agent-software:test-{secrets.token_hex(4)}", failing,
                           "the software of Agent pi (npm package pi 9.9.9)", registry="the npm registry")
    message = str(caught.value)
    assert message.startswith("Could not build the software of Agent pi (npm package pi 9.9.9): ")
    assert "404 Not Found" in message and "the npm registry" in message and "\n" not in message


def test_software_that_cannot_be_had_fails_the_cell_with_its_sentence_and_charges_nothing(
        double: tuple[ProviderDouble, str, Path], warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, bench = double
    funded(warehouse, WS, "20")
    sentence = ("Could not build the software of Agent pi (npm package @mariozechner/pi-coding-agent 0.73.1): "
                "npm error 404 Not Found. It comes from the npm registry at image build time: check that "
                "`docker build` reaches it.")

    def unavailable(*args: object, **kwargs: object) -> str:
        raise AmberError(sentence)

    monkeypatch.setattr(agent_image, "software_image", unavailable)
    _, job = lifecycle.submit(warehouse, WS, local_user(), request(str(bench), "pi", ["gpt-5-mini"]))
    (cell,) = cells_of(warehouse, job.id)
    with pytest.raises(AmberError):
        cell_run.run_cell_of_job(warehouse, job.id, cell.cell_key)
    (after,) = cells_of(warehouse, job.id)
    assert after.status == "failed" and after.message == sentence
    assert get_job(warehouse, job.id, WS).status == "failed"
    assert rows(warehouse, "select * from trials where job_id = ?", [job.id]) == []
    kinds = [r["kind"] for r in rows(warehouse, "select kind from ledger where job_id = ? order by seq", [job.id])]
    assert kinds == ["reservation", "refund"]  # nothing charged, the whole reservation back


def test_agent_list_names_each_agents_software_and_rule() -> None:
    listed = {a["name"]: a for a in json.loads(cli("agent", "list", "--json").stdout)}
    assert set(listed) == set(AGENTS)
    assert listed["claude-code"]["version"].endswith(" 2.1.332") and listed["claude-code"]["providers"] == ["anthropic"]
    assert listed["codex"]["version"] == "@openai/codex 0.171.0" and listed["codex"]["providers"] == ["openai"]
    assert listed["pi"]["runs"] == listed["mini-swe-agent"]["runs"] == "in the sandbox"
    assert listed["terminus-2"]["runs"] == "on the host"


@pytest.mark.slow
def test_an_installed_agent_on_another_hosts_engine_reaches_the_proxy_through_its_relay(
        double: tuple[ProviderDouble, str, Path], warehouse: Warehouse, engine2, primary, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With engine 2 (over TLS) the only engine listed, mini-swe-agent's cell is placed there, where no sandbox
    network can be made: its sandbox reaches the model proxy on this machine through its relay, and the Trial is
    solved, metered and charged as on this machine's own engine. Nothing of it is left on either engine."""
    from servers import dockerd

    from amber_pipeline.jobs import records

    agent, mc = "mini-swe-agent", "gpt-5-mini"
    software = AGENTS[agent].software
    assert software is not None
    for tag in (agent_image._runtime_image(primary), agent_image.software_image(primary, agent, software)):
        engine2.load_image(tag, primary)  # engine 2 cannot fetch packages; its images come from this engine
    engines_file = tmp_path / "engines.toml"
    engines_file.write_text(dockerd.engines_toml(engine2, local_slots=0))
    monkeypatch.setenv("AMBER_SANDBOX_HOSTS", str(engines_file))
    d, key, bench = double
    funded(warehouse, WS, "20")
    _, job = lifecycle.submit(warehouse, WS, local_user(), request(str(bench), agent, [mc]))
    [launch] = records.claim_cells(warehouse, job.id)
    assert launch.pool == "engine2"
    cell_run.run_cell_of_job(warehouse, job.id, launch.cell_key)

    assert get_job(warehouse, job.id, WS).status == "completed"
    (trial,) = rows(warehouse, "select * from trials where job_id = ?", [job.id])
    assert (trial["outcome"], trial["reward"]) == ("scored", 1.0), trial["error_message"]
    calls = rows(warehouse, "select * from transcripts where job_id = ? order by seq", [job.id])
    assert len(calls) == trial["model_calls"] == 3 and all(c["status"] == 200 for c in calls)
    assert len([r for r in d.received if r.body.get("model") == "gpt-5-mini"]) == 3
    (charged,) = rows(warehouse, "select amount from ledger where kind = 'charge' and job_id = ?", [job.id])
    assert Decimal(str(trial["cost_usd"])) == charged["amount"] > 0
    remote = engine2.client()
    assert any(t.startswith(f"amber-agent:{agent}-") for t in remote.images.get(trial["image_id"]).tags)
    for client in (remote, primary):
        assert trial_sandboxes(client, warehouse.paths.runs) == []
