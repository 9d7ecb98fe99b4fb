"""Model calls end to end: Jobs whose every model call goes through the model proxy to a Provider.

The provider double stands in for the Providers on loopback: Anthropic and OpenRouter catalog
configurations reach it through the ``AMBER_<PROVIDER>_BASE_URL`` overrides with fake keys in the
environment (each double demands its key, so a call without the right one fails), and a Workspace's own
OpenAI-compatible configuration names it as its ``base_url``. Jobs are quoted and run in this process the
way the daemon runs them (`lifecycle.submit`, then `cell_run.run_cell_of_job` per cell), and checked where a user
would look: the `trials`, `transcripts` and `ledger` views, the files under AMBER_HOME, the CLI's sentences.
Expected tokens and costs are computed here, from the transcripts' own request and response bodies (the
double counts ``ceil(chars / 4)``), the catalog's TOML and the Providers' pricing rule, not by Amber's code.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before anything imports litellm: no price download

import functools
import json
import logging
import math
import re
import secrets
import shutil
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from helpers import cli, funded, ok, refusal, request, stored_contents

from amber_pipeline.accounts import workspaces
from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.agents.specs import AGENTS
from amber_pipeline.benchmarks import static
from amber_pipeline.jobs import cell_run, lifecycle, static_run
from amber_pipeline.jobs.records import Job, cells_of, get_job
from amber_pipeline.models import configurations
from amber_pipeline.models.configurations import ModelConfiguration, Prices
from amber_pipeline.models.provider_double import Fault, FaultKind, ProviderDouble, load_replay
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse

STATIC = PROJECT_ROOT / "examples" / "static-bench"
DEMO = PROJECT_ROOT / "examples" / "demo-bench"
CATALOG = PROJECT_ROOT / "amber_pipeline" / "models" / "catalog.toml"
STRONG = PROJECT_ROOT / "examples" / "replays" / "replay-strong.json"
WS = DEFAULT_WORKSPACE
MISSED = "town-population"  # the one static Task replay-strong's script answers wrong (examples/README.md)

# The catalog configurations under test and the model id each sends, as the catalog names them.
ANTHROPIC_MC, ANTHROPIC_MODEL = "claude-haiku-4.5", "claude-haiku-4-5"
OPENROUTER_MC, OPENROUTER_MODEL = "or-claude-sonnet-4.6", "anthropic/claude-sonnet-4.6"  # cached price < input
DEEPINFRA_MC, DEEPINFRA_MODEL = "or-deepseek-v3.1-deepinfra", "deepseek/deepseek-chat-v3.1"
COMPAT_MC, COMPAT_MODEL, COMPAT_KEY_ENV = "compat-test", "compat-model", "AMBER_TEST_COMPAT_KEY"
COMPAT_PRICES = {"input": 0.8, "cached_input": 0.08, "output": 4.0}


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def catalog_prices() -> dict[str, dict[str, float]]:
    """Prices per million tokens as the catalog's TOML states them (read here, not through Amber)."""
    tables = tomllib.loads(CATALOG.read_text())["configuration"]
    return {t["name"]: t["prices"] for t in tables} | {COMPAT_MC: COMPAT_PRICES}


def static_instructions(bench: Path) -> dict[str, str]:
    """What the double matches a Task by: the first turn of its Instruction (the first user message)."""
    return {d.name: static.turns((d / "instruction.md").read_text())[0]
            for d in sorted(bench.iterdir()) if (d / "instruction.md").is_file()}


def static_scripts() -> dict[str, list[str]]:
    """replay-strong's answers to the static Tasks."""
    scripts = json.loads(STRONG.read_text())["tasks"]
    return {name: scripts[name] for name in static_instructions(STATIC)}


def copy_tasks(tmp_path: Path, names: list[str]) -> Path:
    bench = tmp_path / "bench"
    for name in names:
        shutil.copytree(STATIC / name, bench / name)
    return bench


@dataclass
class Providers:
    """The doubles standing in for Anthropic, OpenRouter and an OpenAI-compatible endpoint, and their keys."""

    anthropic: ProviderDouble
    openrouter: ProviderDouble
    compat: ProviderDouble
    keys: dict[str, str]  # environment variable -> the key its Provider demands


@pytest.fixture
def providers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warehouse: Warehouse) -> Iterator[Providers]:
    scripts = static_scripts()
    replays = []
    for model in (ANTHROPIC_MODEL, OPENROUTER_MODEL, DEEPINFRA_MODEL, COMPAT_MODEL):
        path = tmp_path / "replays" / f"{model.replace('/', '_')}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"model": model.rsplit("/", 1)[-1], "tasks": scripts}))
        replays.append(load_replay(path))
    keys = {var: f"sk-amber-test-KEY-{secrets.token_hex(16)}"
            for var in ("ANTHROPIC_API_KEY", "OPENROUTER_API_KEY", COMPAT_KEY_ENV)}
    instructions = static_instructions(STATIC)
    monkeypatch.setenv("AMBER_SECRETS_FILE", str(tmp_path / "no-secrets.env"))  # never the developer's file
    for var in ("OPENAI_API_KEY", "AMBER_OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    for var, key in keys.items():
        monkeypatch.setenv(var, key)
    with ProviderDouble(replays, instructions, api_key=keys["ANTHROPIC_API_KEY"]) as anthropic, \
            ProviderDouble(replays, instructions, api_key=keys["OPENROUTER_API_KEY"]) as openrouter, \
            ProviderDouble(replays, instructions, api_key=keys[COMPAT_KEY_ENV]) as compat:
        monkeypatch.setenv("AMBER_ANTHROPIC_BASE_URL", anthropic.base_url)
        monkeypatch.setenv("AMBER_OPENROUTER_BASE_URL", openrouter.openrouter_base_url)
        funded(warehouse, WS, "50")
        configurations.add(warehouse.paths, WS, ModelConfiguration(
            name=COMPAT_MC, model=COMPAT_MODEL, provider="openai-compatible", base_url=compat.base_url,
            key_env=COMPAT_KEY_ENV, prices=Prices(**COMPAT_PRICES, source="made up for the tests")))
        yield Providers(anthropic, openrouter, compat, keys)


def run_job(wh: Warehouse, bench: Path, models: list[str], agent: str = "direct") -> Job:
    _, job = lifecycle.submit(wh, WS, local_user(), request(str(bench), agent, models))
    for cell in cells_of(wh, job.id):
        cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
    return get_job(wh, job.id, WS)


def rows(wh: Warehouse, query: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    """A query over the Workspace's views (what `amber sql` shows), as dicts."""
    with wh.query(WS) as con:
        cursor = con.execute(query, params or [])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


# ---- what a transcript says, read by hand -------------------------------------------------------------------------

def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def expected_usage(transcript: dict[str, Any]) -> tuple[int, int, int]:
    """(input incl. cached, cached, output) the Provider reports for this call, from its bodies alone."""
    request_body = json.loads(transcript["request"])
    texts = ([_text(request_body["system"])] if "system" in request_body else []) + [
        _text(m["content"]) for m in request_body["messages"]]
    prior_turns = sum(m["role"] == "assistant" for m in request_body["messages"])
    answer = json.loads(transcript["response"])
    reply = (answer["choices"][0]["message"]["content"] if transcript["wire"] == "chat"
             else "".join(b["text"] for b in answer["content"]))
    # Chat Providers count a conversation's earlier messages as cached from its second turn; Anthropic caches
    # only what a request marks with cache_control, and the Direct Agent marks nothing.
    cached = tokens("".join(texts[:-1])) if transcript["wire"] == "chat" and prior_turns else 0
    return tokens("".join(texts)), cached, tokens(reply)


def cost(prices: dict[str, float], input_tokens: int, cached: int, output: int) -> Decimal:
    """Uncached input at the input price, cached input at the cached price, output at the output price; the
    ledger keeps micro-dollars."""
    per_million = (Decimal(str(prices["input"])) * (input_tokens - cached)
                   + Decimal(str(prices["cached_input"])) * cached + Decimal(str(prices["output"])) * output)
    return (per_million / 1_000_000).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)


def charges(wh: Warehouse, job_id: str) -> dict[str, Decimal]:
    return {r["trial_key"]: r["amount"] for r in
            rows(wh, "select trial_key, amount from ledger where kind = 'charge' and job_id = ?", [job_id])}


def calls_of(trial: dict[str, Any], transcripts: list[dict[str, Any]], retry: int | None = None) -> list[dict]:
    """The transcripts of a Trial (of one of its attempts), in call order."""
    suffix = f"/{trial['task_name']}/{trial['attempt']}"
    return [c for c in transcripts if c["cell_key"] == trial["cell_key"] and c["trial_key"].endswith(suffix)
            and (retry is None or c["retry"] == retry)]


def n_turns(task: str) -> int:
    return len(static.turns((STATIC / task / "instruction.md").read_text()))


# ---- (a) static Jobs against Anthropic, OpenRouter and an OpenAI-compatible endpoint -------------------------------

def test_a_static_job_is_metered_and_charged_what_the_providers_reported(providers: Providers,
                                                                         warehouse: Warehouse) -> None:
    wh = warehouse
    job = run_job(wh, STATIC, [ANTHROPIC_MC, OPENROUTER_MC, COMPAT_MC])
    assert job.status == "completed"
    trials = rows(wh, "select * from trials where job_id = ?", [job.id])
    transcripts = rows(wh, "select * from transcripts where job_id = ? order by trial_key, retry, seq", [job.id])
    prices = catalog_prices()
    n_tasks = len(static_instructions(STATIC))

    by_model: dict[str, list[dict[str, Any]]] = {}
    for t in trials:
        by_model.setdefault(t["model_configuration"], []).append(t)
    assert sorted(by_model) == sorted([ANTHROPIC_MC, OPENROUTER_MC, COMPAT_MC])
    for model, its in by_model.items():
        assert len(its) == n_tasks, model
        assert all(t["outcome"] == "scored" and t["retries"] == 0 for t in its), model
        assert {t["task_name"] for t in its if t["reward"] == 0.0} == {MISSED}, model
        assert sum(t["reward"] for t in its) == n_tasks - 1

    billed = charges(wh, job.id)
    charged_per_cell: dict[str, Decimal] = {}
    for t in trials:
        calls = calls_of(t, transcripts)
        assert calls and all(c["status"] == 200 and c["signal"] is None for c in calls)
        assert len(calls) == t["model_calls"] == n_turns(t["task_name"])
        used = [expected_usage(c) for c in calls]
        for c, u in zip(calls, used, strict=True):
            assert (c["input_tokens"], c["cached_input_tokens"], c["output_tokens"]) == u, c
        total = (sum(u[0] for u in used), sum(u[1] for u in used), sum(u[2] for u in used))
        assert (t["input_tokens"], t["cached_input_tokens"], t["output_tokens"]) == total
        expected = cost(prices[t["model_configuration"]], *total)
        (key,) = {c["trial_key"] for c in calls}
        assert billed.pop(key) == expected, (t["task_name"], t["model_configuration"])
        assert Decimal(str(t["cost_usd"])) == expected
        charged_per_cell[t["model_configuration"]] = charged_per_cell.get(t["model_configuration"], 0) + expected
    assert billed == {}  # a charge per Trial, and nothing else charged
    assert any(c["cached_input_tokens"] > 0 for c in transcripts), "later turns of the multi-turn Task are cached"

    (spending,) = rows(wh, "select * from job_spending where job_id = ?", [job.id])
    assert spending["charged"] == sum(charged_per_cell.values()) and spending["settled"]
    cells = {r["model_configuration"]: r for r in rows(wh, "select * from cell_results")}
    for model, charged in charged_per_cell.items():
        assert cells[model]["errored"] == 0 and cells[model]["n_trials"] == n_tasks
        assert math.isclose(cells[model]["cost_usd"], float(charged), rel_tol=1e-9)

    # What arrived at each Provider: the configuration's model and settings, the real key, no Trial token.
    for double, model, key_var in ((providers.anthropic, ANTHROPIC_MODEL, "ANTHROPIC_API_KEY"),
                                   (providers.openrouter, OPENROUTER_MODEL, "OPENROUTER_API_KEY"),
                                   (providers.compat, COMPAT_MODEL, COMPAT_KEY_ENV)):
        received = double.received
        assert len(received) == sum(n_turns(task) for task in static_instructions(STATIC))
        for r in received:
            assert r.body["model"] == model
            sent_key = r.headers.get("x-api-key") or r.headers["authorization"].removeprefix("Bearer ")
            assert sent_key == providers.keys[key_var]
            assert "amber-trial-" not in json.dumps(r.headers) + json.dumps(r.body)
    for r in providers.anthropic.received:
        assert r.path == "/v1/messages" and r.body["max_tokens"] == 16000  # the catalog's max_output_tokens
    for r in providers.openrouter.received:
        assert r.path == "/api/v1/chat/completions"
        assert r.body["provider"] == {"order": ["anthropic"], "allow_fallbacks": False}  # quantization unknown
        assert r.body["max_tokens"] == 16000



# ---- (b) Provider trouble makes a Trial Errored and retried, never Reward 0, never charged ------------------------

@pytest.mark.parametrize(("kind", "model", "signal"), [
    ("server_error", ANTHROPIC_MC, "upstream_5xx"),
    ("rate_limit", ANTHROPIC_MC, "upstream_429"),
    ("other_provider", DEEPINFRA_MC, "provider_mismatch"),
])
def test_provider_trouble_makes_a_trial_errored_and_retried_while_the_others_score(
        providers: Providers, warehouse: Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        kind: FaultKind, model: str, signal: str) -> None:
    """One Trial at a time, so the fault's calls are known: the first Trial's three attempts all fail (it ends
    Errored after two retries), the second Trial's first attempt fails (it is retried and scores), the third
    never meets it."""
    wh = warehouse
    monkeypatch.setattr(cell_run, "run_static_cell", functools.partial(static_run.run_static_cell, concurrency=1))
    double = providers.anthropic if model == ANTHROPIC_MC else providers.openrouter
    double.inject(Fault(kind, count=4))
    bench = copy_tasks(tmp_path, ["capital-city", "moon-landing-date", "semver-minor-bump"])
    job = run_job(wh, bench, [model])
    assert job.status == "completed"
    trials = sorted(rows(wh, "select * from trials where job_id = ?", [job.id]), key=lambda t: -t["retries"])
    transcripts = rows(wh, "select * from transcripts where job_id = ? order by retry, seq", [job.id])
    errored, retried, clean = trials

    assert errored["outcome"] == "errored" and errored["errored"] and errored["reward"] is None
    assert errored["retries"] == 2 and errored["error_type"] == signal
    assert [(c["retry"], c["signal"]) for c in calls_of(errored, transcripts)] == [(0, signal), (1, signal),
                                                                                  (2, signal)]
    for t in (retried, clean):
        assert t["outcome"] == "scored" and t["reward"] == 1.0 and t["error_type"] is None
    assert retried["retries"] == 1 and clean["retries"] == 0
    assert [(c["retry"], c["signal"]) for c in calls_of(retried, transcripts)] == [(0, signal), (1, None)]

    # Charged: the scored Trials, each for the attempt that scored; the Errored attempts, not at all.
    prices = catalog_prices()[model]
    billed = charges(wh, job.id)
    assert len(billed) == 2
    for t in (retried, clean):
        (call,) = calls_of(t, transcripts, retry=t["retries"])
        assert billed[call["trial_key"]] == cost(prices, *expected_usage(call)) == Decimal(str(t["cost_usd"]))
    assert calls_of(errored, transcripts)[0]["trial_key"] not in billed

    (cell,) = rows(wh, "select * from cell_results")
    assert cell["errored"] == 1 and cell["mean_reward"] == 1.0  # the Errored Trial is left out of the mean
    (spending,) = rows(wh, "select * from job_spending where job_id = ?", [job.id])
    assert spending["charged"] == sum(billed.values()) and spending["settled"]
    reported = Decimal(str(cell["cost_usd"])).quantize(Decimal("0.000001"))
    assert reported == spending["charged"]  # the cost a report shows is what the Wallet paid


# ---- (c) an agentic Job: Terminus-2 in a sandbox, its calls metered by the proxy ------------------------------------

@pytest.mark.docker
def test_a_terminus_2_trial_is_charged_what_the_proxy_metered_with_the_agents_own_report_beside_it(
        tmp_path: Path, warehouse: Warehouse) -> None:
    wh = warehouse
    bench = tmp_path / "bench"
    shutil.copytree(DEMO / "ini-port-change", bench / "ini-port-change")
    funded(wh, WS, "10")
    job = run_job(wh, bench, ["replay-strong"], agent="terminus-2")
    assert job.status == "completed"
    (trial,) = rows(wh, "select * from trials where job_id = ?", [job.id])
    assert trial["outcome"] == "scored" and trial["reward"] == 1.0, trial["error_message"]
    calls = rows(wh, "select * from transcripts where job_id = ? and retry = ? order by seq",
                 [job.id, trial["retries"]])
    assert len(calls) == trial["model_calls"] >= 2  # Terminus-2 looks, acts, then confirms it is done
    assert all(c["status"] == 200 and c["signal"] is None and c["wire"] == "chat" for c in calls)
    metered = (sum(c["input_tokens"] for c in calls), sum(c["cached_input_tokens"] for c in calls),
               sum(c["output_tokens"] for c in calls))
    assert metered[0] > 0 and metered[2] > 0
    assert (trial["input_tokens"], trial["cached_input_tokens"], trial["output_tokens"]) == metered
    for c in calls:  # each call as the double counts it, from the transcript's own bodies
        assert (c["input_tokens"], c["cached_input_tokens"], c["output_tokens"]) == expected_usage(c)
    # What the Agent says it used is kept beside what was metered, never instead of it.
    assert trial["agent_input_tokens"] is not None and trial["agent_input_tokens"] > 0
    assert trial["agent_output_tokens"] is not None and trial["agent_output_tokens"] > 0
    (charge,) = charges(wh, job.id).values()
    replay_prices = json.loads(ok(cli("model", "show", "replay-strong", "--json")))["prices"]
    sandbox = (Decimal(str(trial["duration_sec"])) / 3600 * Decimal("0.05")).quantize(Decimal("0.000001"),
                                                                                   rounding=ROUND_HALF_UP)
    assert charge == Decimal(str(trial["cost_usd"])) == cost(replay_prices, *metered) + sandbox


# ---- (d) the key grep: a Provider's key is nowhere Amber writes ------------------------------------------------------

def test_no_provider_key_is_written_anywhere_printed_or_logged(
        providers: Providers, warehouse: Warehouse, amber_home: Path, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """A Job against all three Providers, with some of their calls failing on the way (errors are where keys
    leak), then everything a user can look at afterwards."""
    wh = warehouse
    caplog.set_level(logging.DEBUG)
    providers.anthropic.inject(Fault("rate_limit"))
    providers.anthropic.inject(Fault("cut_stream"))
    providers.openrouter.inject(Fault("server_error"))
    providers.compat.inject(Fault("overloaded"))
    job = run_job(wh, STATIC, [ANTHROPIC_MC, OPENROUTER_MC, COMPAT_MC])
    assert job.status == "completed"
    trials = rows(wh, "select outcome, retries from trials where job_id = ?", [job.id])
    assert len(trials) == 3 * len(static_instructions(STATIC)) and {t["outcome"] for t in trials} == {"scored"}
    assert sum(t["retries"] for t in trials) == 4  # each fault cost one retry
    shown = [ok(cli(*args)) for args in (
        ("results", job.id), ("job", "status", job.id), ("model", "show", ANTHROPIC_MC), ("model", "show", COMPAT_MC),
        ("sql", "select * from transcripts"), ("sql", "select * from trials"), ("sql", "select * from ledger"))]
    assert "amber-trial-" not in "".join(shown)

    secrets_ = [key.encode() for key in providers.keys.values()] + [b"amber-trial-"]  # and no Trial token either
    seen: set[str] = set()  # what the search found that it must find, else it proves nothing
    for path, kind, blob in stored_contents(amber_home):
        for secret in secrets_:
            assert secret not in blob, f"{secret.decode()} is stored in {path.relative_to(amber_home)} ({kind})"
        if kind == "parquet" and b"What is the capital city of Australia?" in blob:
            seen.add("a transcript's request, decoded")
        if kind == "duckdb" and job.id.encode() in blob:
            seen.add("the Job in the catalog, decoded")
    assert seen == {"a transcript's request, decoded", "the Job in the catalog, decoded"}
    out, err = capfd.readouterr()
    said = out + err + "".join(shown) + "".join(
        r.getMessage() + (r.exc_text or "") for r in caplog.records)
    for key in providers.keys.values():
        assert key not in said
    assert caplog.records, "log records were captured (else their check proves nothing)"


# ---- (e) refusals at quote time: one sentence each, no traceback, nothing reserved -----------------------------------

def quote_refused(wh: Warehouse, *args: str) -> str:
    message = refusal(cli("job", "quote", *args))
    assert len(re.findall(r"[.!?](?:\s|$)", re.sub(r"`[^`]*`", "", message))) == 1, message  # one sentence
    with wh.query(WS) as con:
        assert con.execute("select kind from ledger").fetchall() == [("credit",)]  # nothing reserved
        assert con.execute("select count(*) from jobs").fetchone() == (0,)
    return message


@pytest.mark.parametrize(("variable", "model", "provider"), [("ANTHROPIC_API_KEY", ANTHROPIC_MC, "anthropic"),
                                                             ("OPENROUTER_API_KEY", OPENROUTER_MC, "openrouter"),
                                                             (COMPAT_KEY_ENV, COMPAT_MC, "openai-compatible")])
def test_a_provider_without_a_key_is_refused_naming_the_variable(
        providers: Providers, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch, variable: str, model: str,
        provider: str) -> None:
    monkeypatch.delenv(variable)
    message = quote_refused(warehouse, str(STATIC), "--agent", "direct", "--model", model)
    assert message.startswith(f"No API key for {provider}: set {variable} ")
    for key in providers.keys.values():
        assert key not in message


def test_an_agent_with_a_provider_rule_refuses_another_providers_model(providers: Providers,
                                                                      warehouse: Warehouse) -> None:
    ruled = [a for a in AGENTS.values() if a.providers is not None]
    if not ruled:
        pytest.skip("no Agent with a Provider rule (Claude Code, Codex CLI) ships yet")
    agent = ruled[0]
    allowed = agent.providers or frozenset()
    other = next(m for m in (ANTHROPIC_MC, OPENROUTER_MC, COMPAT_MC)
                 if configurations.model_configuration(m, warehouse.paths, WS).provider not in allowed)
    message = quote_refused(warehouse, str(DEMO), "--agent", agent.name, "--model", other)
    assert f"{agent.name} runs only with" in message and other in message


def test_the_direct_agent_on_a_benchmark_with_environments_is_refused(providers: Providers,
                                                                     warehouse: Warehouse) -> None:
    message = quote_refused(warehouse, str(DEMO), "--agent", "direct", "--model", ANTHROPIC_MC)
    n = sum(1 for d in DEMO.iterdir() if (d / "task.toml").is_file())
    assert f"runs only static Tasks, and {n} of this Benchmark's {n} Tasks have an Environment" in message


def test_a_static_benchmark_with_terminus_2_is_refused(providers: Providers, warehouse: Warehouse) -> None:
    message = quote_refused(warehouse, str(STATIC), "--agent", "terminus-2", "--model", ANTHROPIC_MC)
    n = len(static_instructions(STATIC))
    assert f"This Benchmark has {n} static Tasks, which only the Direct Agent runs" in message


def test_a_private_benchmark_is_not_sent_to_a_provider_the_policy_excludes(providers: Providers,
                                                                           warehouse: Warehouse) -> None:
    workspaces.set_provider_policy(warehouse, Actor(local_user(), WS), WS, ["openai", "deepinfra"])
    message = quote_refused(warehouse, str(STATIC), "--agent", "direct", "--model", OPENROUTER_MC)
    assert "sends its private Benchmarks only to deepinfra, openai" in message
    assert f"{OPENROUTER_MC} is served by anthropic" in message


def test_an_unknown_model_configuration_is_refused(providers: Providers, warehouse: Warehouse) -> None:
    message = quote_refused(warehouse, str(STATIC), "--agent", "direct", "--model", "claude-nine")
    assert message.startswith("Unknown Model Configuration 'claude-nine': choose one of ")
    assert ANTHROPIC_MC in message and COMPAT_MC in message  # the catalog's and the Workspace's own
