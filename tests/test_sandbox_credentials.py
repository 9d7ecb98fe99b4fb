"""A sandbox gets only what Amber gives it: nothing of the environment of the process that runs the Trials.

That process holds the Providers' keys (the model proxy's) and whatever else its operator's environment has,
and Harbor's agents fall back to that environment wherever a Trial's configuration leaves a gap: Claude Code
for its OAuth token and Bedrock's AWS credentials, pi for Anthropic's OAuth token, Codex CLI for a login
file, every Agent for Provider keys, base URLs and settings, a Task's env tables for any ``${VAR}``. The
canary test puts a value of its own into every variable Harbor 0.25's code for the Agents Amber runs reads
(`CREDENTIALS` and `SETTINGS`), runs every Agent on one demo Task against the provider double, and then looks
for the values everywhere a Trial leaves something:

- what each sandbox was given, caught as it was given: every container's ``docker inspect`` just after it was
  made (Env, Cmd, Labels: its whole configuration), the command line and environment of every command run in
  it, and every file copied into it;
- every file under AMBER_HOME, the Trial folders among them (Parquet and DuckDB decoded as well);
- the transcripts, as a user reads them with SQL;
- the log records of the run and what it printed.

The Provider keys among the canaries (ANTHROPIC_API_KEY, OPENAI_API_KEY) are the model proxy's real keys here,
so the provider double must see them, and only it. The tests before it take each way in on its own, without
Docker: Harbor's lookups on each Agent as a Trial makes it, a Task's env tables, and what Terminus-2's calls
carry (it runs on this machine and calls the model proxy through litellm: headers included, which the proxy
keeps nowhere). Everything stays on this machine: loopback, and the sandboxes the test starts.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before anything imports litellm: no price download

import asyncio
import dataclasses
import importlib.util
import json
import logging
import re
import secrets
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import funded, request, stored_contents

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.agents.specs import AGENTS
from amber_pipeline.jobs import cell_run, lifecycle
from amber_pipeline.jobs.records import cells_of, get_job
from amber_pipeline.models.provider_double import ProviderDouble, load_replay
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.sandbox import agent_image, docker_engine
from amber_pipeline.warehouse.catalog import Warehouse

HARBOR = Path(str(importlib.util.find_spec("harbor").origin)).parent
DEMO = PROJECT_ROOT / "examples" / "demo-bench"
STRONG = PROJECT_ROOT / "examples" / "replays" / "replay-strong.json"
TASK = "count-log-errors"  # replay-strong solves it in two commands; its oracle scores 1 and nop 0
WS = DEFAULT_WORKSPACE

# Every credential-like variable Harbor 0.25 reads for the Agents Amber runs. Made by listing the upper-case
# string literals of the modules on their code paths (HARBOR_MODULES: the agents' classes, the model connection
# resolver with its PROVIDERS table of each Provider's key and base-URL names, the options' fallbacks, litellm's
# glue) and keeping those that name a key, token, secret, OAuth, AWS/Bedrock, Google/Vertex or Azure setting, a
# base URL or endpoint, or an org/project id (`_credential_like`; `test_the_canaries_cover_what_harbor_reads`
# makes the list again, so a Harbor that reads one more fails there). Added by hand: what litellm and the
# openai SDK read on this machine for Terminus-2's calls (OPENAI_ORGANIZATION, OPENAI_ORG_ID, OPENAI_PROJECT,
# OPENAI_PROJECT_ID) and DOCKER_CONFIG, whose proxies the Docker SDK would add to every container's Env.
CREDENTIALS = (
    "AI21_API_KEY", "AI_GATEWAY_API_KEY", "ALEPH_ALPHA_API_KEY", "ANTHROPIC_API_BASE", "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_SMALL_FAST_MODEL_AWS_REGION",
    "ANYSCALE_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_BEARER_TOKEN_BEDROCK", "AWS_DEFAULT_REGION", "AWS_PROFILE",
    "AWS_PROFILE_NAME", "AWS_REGION", "AWS_REGION_NAME", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AZURE_API_BASE", "AZURE_API_KEY", "AZURE_API_VERSION", "AZURE_BASE_URL", "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_API_VERSION", "AZURE_OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT", "AZURE_RESOURCE_NAME",
    "BASETEN_API_KEY", "CEREBRAS_API_KEY", "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_FORCE_OAUTH", "CLOUDFLARE_API_KEY", "CODESTRAL_API_KEY", "CODEX_API_KEY",
    "CODEX_AUTH_JSON_PATH", "CODEX_FORCE_AUTH_JSON", "COHERE_API_KEY", "DASHSCOPE_API_KEY", "DATABRICKS_HOST",
    "DATABRICKS_TOKEN", "DATAROBOT_API_TOKEN", "DEEPINFRA_API_BASE", "DEEPINFRA_API_KEY", "DEEPSEEK_API_BASE",
    "DEEPSEEK_API_KEY", "DEEPSEEK_BASE_URL", "DOCKER_CONFIG", "DOUBAO_API_KEY", "DOUBAO_BASE_URL",
    "FEATHERLESS_AI_API_KEY", "FIREWORKS_AI_API_KEY", "GEMINI_API_BASE", "GEMINI_API_KEY", "GITHUB_TOKEN",
    "GOOGLE_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_BASE_URL", "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_CLOUD_PROJECT", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENERATIVE_AI_API_KEY", "GROQ_API_BASE",
    "GROQ_API_KEY", "GROQ_BASE_URL", "HF_TOKEN", "HUGGINGFACE_API_KEY", "INFINITY_API_KEY", "KIMI_API_KEY",
    "KIMI_BASE_URL", "LLAMA_API_KEY", "MAX_THINKING_TOKENS", "META_API_KEY", "META_BASE_URL", "MINIMAX_API_BASE",
    "MINIMAX_API_KEY", "MINIMAX_BASE_URL", "MINI_SWE_AGENT_MODEL_API_KEY_JSON", "MISTRAL_API_BASE",
    "MISTRAL_API_KEY", "MISTRAL_BASE_URL", "MODEL_API_KEY", "MOONSHOT_API_BASE", "MOONSHOT_API_KEY",
    "MSWEA_API_KEY", "NEBIUS_API_BASE", "NEBIUS_API_KEY", "NLP_CLOUD_API_KEY", "NOVITA_API_KEY", "NVIDIA_API_KEY",
    "NVIDIA_BASE_URL", "NVIDIA_NIM_API_KEY", "NVM_NODEJS_ORG_MIRROR", "OLLAMA_API_BASE", "OLLAMA_API_KEY",
    "OLLAMA_BASE_URL", "OPENAI_API_BASE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORGANIZATION",
    "OPENAI_ORG_ID", "OPENAI_PROJECT", "OPENAI_PROJECT_ID", "OPENCODE_API_KEY", "OPENROUTER_API_BASE",
    "OPENROUTER_API_KEY", "OPENROUTER_BASE_URL", "OVHCLOUD_API_KEY", "OVHCLOUD_BASE_URL", "PALM_API_KEY",
    "PERPLEXITYAI_API_KEY", "REPLICATE_API_KEY", "SAMBANOVA_API_BASE", "SAMBANOVA_API_KEY", "TETRATE_API_KEY",
    "TETRATE_HOST", "TOGETHERAI_API_KEY", "TOGETHER_AI_API_BASE", "TOGETHER_API_KEY", "VERCEL_AI_GATEWAY_API_BASE",
    "VERCEL_AI_GATEWAY_API_KEY", "VERCEL_AI_GATEWAY_BASE_URL", "VERTEXAI_PROJECT", "VOLCENGINE_API_KEY",
    "VOYAGE_API_KEY", "WRITER_API_KEY", "WRITER_BASE_URL", "XAI_API_KEY", "XAI_BASE_URL", "ZAI_API_KEY",
)
# The Agents' settings Harbor reads from the same environment (by `_get_env`, an option's fallback, or
# `os.environ` itself), found the same way: a value there would change what an Agent does in a user's Trial.
SETTINGS = (
    "ANTHROPIC_DEFAULT_FABLE_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_MODEL", "CLAUDE_CODE_DISABLE_ADAPTIVE_THINKING",
    "CLAUDE_CODE_EFFORT_LEVEL", "CLAUDE_CODE_MAX_TURNS", "CLAUDE_CODE_SUBAGENT_MODEL", "DISABLE_PROMPT_CACHING",
)
HARBOR_MODULES = (
    "agents/base.py", "agents/installed/base.py", "agents/installed/claude_code.py", "agents/installed/codex.py",
    "agents/installed/pi.py", "agents/installed/mini_swe_agent.py", "agents/terminus_2/terminus_2.py",
    "agents/terminus_2/tmux_session.py", "agents/oracle.py", "agents/nop.py", "agents/agent_auth_resolution.py",
    "agents/options.py", "agents/mcp_headers.py", "llms/lite_llm.py", "llms/litellm_config.py", "llms/utils.py",
)
# Flags Harbor reads as booleans or compares with "1": set so, they steer it down the paths that read the
# others (Bedrock's AWS credentials, Claude's OAuth token, Codex's login file); they are looked for by name.
FLAGS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_FORCE_OAUTH", "CODEX_FORCE_AUTH_JSON", "GOOGLE_GENAI_USE_VERTEXAI",
         "CLAUDE_CODE_DISABLE_ADAPTIVE_THINKING", "DISABLE_PROMPT_CACHING")
# Settings Harbor checks against a fixed set of values (a canary there would only fail validation): the value
# set, and what Harbor writes into the Agent's command when it reads it.
TYPED = {"CLAUDE_CODE_EFFORT_LEVEL": ("low", "--effort ")}
# The Provider keys: the model proxy's own here, demanded by the doubles.
PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")

# (Agent, Model Configuration) of each Job; the Terminus-2 Job brings the oracle and nop as its bounds. pi talks
# Anthropic Messages, the only way it reads ANTHROPIC_OAUTH_TOKEN.
JOBS = [("claude-code", "claude-haiku-4.5"), ("codex", "gpt-5-mini"), ("pi", "claude-haiku-4.5"),
        ("mini-swe-agent", "gpt-5-mini"), ("terminus-2", "gpt-5-mini")]
REWARDS = {"claude-code": 1.0, "codex": 1.0, "pi": 1.0, "mini-swe-agent": 1.0, "terminus-2": 1.0, "oracle": 1.0,
           "nop": 0.0}


def _credential_like(name: str) -> bool:
    return re.search(r"KEY|TOKEN|SECRET|OAUTH|AUTH|PASSWORD|CREDENTIAL|AWS|BEDROCK|VERTEX|GOOGLE|AZURE|BASE_URL|"
                     r"API_BASE|ENDPOINT|HOST|ORG|PROJECT|PROFILE|REGION", name) is not None


def _harbor_source() -> str:
    return "\n".join((HARBOR / module).read_text() for module in HARBOR_MODULES)


def test_the_canaries_cover_what_harbor_reads() -> None:
    """The lists above, made again from Harbor's sources: every credential-like name they hold, and every
    variable they read from `os.environ` by name (but CLAUDE_CONFIG_DIR, which only Claude Code's `handoff`
    reads: a local command, never a Trial), each of which Amber's class of that Agent drops."""
    from amber_pipeline.agents.installed import ClaudeCode

    source = _harbor_source()
    named = {n for n in re.findall(r'"([A-Z][A-Z0-9_]{2,})"', source) if _credential_like(n)}
    assert named <= set(CREDENTIALS), sorted(named - set(CREDENTIALS))
    direct = set(re.findall(r'os\.(?:environ\.get|getenv)\(\s*"([A-Z0-9_]+)"|os\.environ\[\s*"([A-Z0-9_]+)"',
                            source))
    read = {a or b for a, b in direct} - {"CLAUDE_CONFIG_DIR"}
    assert read <= set(CREDENTIALS) | set(SETTINGS), sorted(read - set(CREDENTIALS) - set(SETTINGS))
    assert read == ClaudeCode._READ_FROM_HOST  # all of them in claude_code.py's run()
    assert set(FLAGS) | set(TYPED) <= set(CREDENTIALS) | set(SETTINGS)


@dataclass
class Canaries:
    """A value of the test's own in each variable; `find` names the variables whose value a text holds."""

    values: dict[str, str]
    # Not looked for as such: flags and typed settings, whose values are no canaries (found otherwise), and
    # DOCKER_CONFIG, a folder this process's Docker clients read (and log) for what its file holds, DOCKER_PROXY.
    common: frozenset[str] = frozenset(FLAGS) | frozenset(TYPED) | {"DOCKER_CONFIG"}

    def find(self, blob: bytes | str) -> list[str]:
        data = blob.encode() if isinstance(blob, str) else blob
        return [name for name, value in self.values.items() if name not in self.common and value.encode() in data]


def _canaries(tmp_path: Path) -> Canaries:
    nonce = secrets.token_hex(6)
    values: dict[str, str] = {}
    for index, name in enumerate((*CREDENTIALS, *SETTINGS)):
        canary = f"canary-{nonce}-{index:03d}-{name.lower().replace('_', '-')}"  # none a part of another
        if name in FLAGS:
            values[name] = "1"
        elif name in TYPED:
            values[name] = TYPED[name][0]
        elif re.search(r"TOKENS|TURNS", name):  # numbers: Harbor validates them as such
            values[name] = str(10**14 + secrets.randbelow(9 * 10**14))
        elif re.search(r"BASE|URL|ENDPOINT|HOST|MIRROR", name):  # a URL that stays on a loopback port nothing serves
            values[name] = f"http://127.0.0.1:9/{canary}"
        else:
            values[name] = canary
    auth = tmp_path / f"codex-login-{nonce}" / "auth.json"
    auth.parent.mkdir()
    auth.write_text(json.dumps({"OPENAI_API_KEY": f"canary-{nonce}-codex-login-key"}))
    values["CODEX_AUTH_JSON_PATH"] = str(auth)
    values["CODEX_LOGIN_KEY"] = f"canary-{nonce}-codex-login-key"  # in no variable: the file's content
    docker_config = tmp_path / f"docker-config-{nonce}"
    docker_config.mkdir()
    proxy = f"http://127.0.0.1:9/canary-{nonce}-docker-proxy"
    (docker_config / "config.json").write_text(json.dumps({"proxies": {"default": {
        "httpProxy": proxy, "httpsProxy": proxy, "noProxy": f"canary-{nonce}-docker-no-proxy"}}}))
    values["DOCKER_CONFIG"] = str(docker_config)
    values["DOCKER_PROXY"] = proxy  # in no variable: what DOCKER_CONFIG's file holds
    return Canaries(values)


def _set(canaries: Canaries, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*CREDENTIALS, *SETTINGS):
        monkeypatch.setenv(name, canaries.values[name])


# ---- each way in, on its own -------------------------------------------------------------------------------------


def _built(agent: str, tmp_path: Path, *, prefix: str | None = None,
           proxy: str = "http://127.0.0.1:9") -> tuple[Any, dict[str, str]]:
    """The agent Harbor's factory makes of Amber's configuration of ``agent`` for a Trial, as a Trial makes it,
    and the environment Amber gives it."""
    from harbor.agents.factory import AgentFactory
    from harbor.models.trial.config import AgentConfig

    from amber_pipeline.agents.connection import harbor_agent

    prefix = prefix or ("anthropic" if agent in ("claude-code", "pi") else "openai")
    made = harbor_agent(AGENTS[agent], litellm_prefix=prefix, model="m", proxy=proxy, token="amber-trial-test")
    config = AgentConfig(name=made.name, import_path=made.import_path, model_name=made.model_name,
                         kwargs=made.kwargs, env=made.env)
    return AgentFactory.create_agent_from_config(config, logs_dir=tmp_path / "logs"), made.env


@pytest.mark.parametrize("agent", ["claude-code", "codex", "pi", "mini-swe-agent", "terminus-2"])
def test_an_agent_reads_only_the_environment_amber_gives_it(agent: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Harbor's lookups (`_get_env`, the options' fallbacks, the model connection), with a canary in every
    variable: each finds what Amber gave the Agent, or nothing."""
    canaries = _canaries(tmp_path)
    _set(canaries, monkeypatch)
    built, given = _built(agent, tmp_path)
    found = {name: value for name in (*CREDENTIALS, *SETTINGS) if (value := built._get_env(name)) is not None}
    assert found == {name: value for name, value in given.items() if name in found}
    connection = built.model_connection
    assert connection.api_key == "amber-trial-test"
    described = json.dumps([built.options.model_dump(), dataclasses.asdict(connection), built.extra_env], default=str)
    assert canaries.find(described) == []
    if agent == "claude-code":  # what its run passes to the sandbox for the model and the login
        assert canaries.find(json.dumps(built._resolve_auth_env())) == []


@pytest.mark.parametrize(("value", "filled"), [
    ("plain", "plain"),
    ("${CANARY_TEST_VARIABLE:-fallback}", "fallback"),
    ("${CANARY_TEST_VARIABLE:-}", ""),
    ("Bearer ${CANARY_TEST_VARIABLE}", "Bearer ${CANARY_TEST_VARIABLE}"),  # Harbor passes it on as written
])
def test_a_tasks_env_table_is_filled_as_if_the_server_had_no_environment(value: str, filled: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from amber_pipeline.sandbox.task_env import without_host

    monkeypatch.setenv("CANARY_TEST_VARIABLE", "the server's")
    assert without_host({"NAME": value}, "[verifier].env") == {"NAME": filled}


def test_a_task_env_value_only_the_server_could_give_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    from amber_pipeline.sandbox.task_env import HostValueRequired, without_host

    monkeypatch.setenv("OPENAI_API_KEY", "the server's")
    with pytest.raises(HostValueRequired) as refused:
        without_host({"JUDGE_KEY": "${OPENAI_API_KEY}"}, "[verifier].env")
    assert str(refused.value) == (
        "The Task's [verifier].env sets JUDGE_KEY from the server's environment (${OPENAI_API_KEY}), which Amber "
        "never passes into a sandbox: give JUDGE_KEY a value, or a default (${OPENAI_API_KEY:-...}).")


# ---- Terminus-2's calls, made on this machine -----------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["openai", "anthropic"])
def test_terminus_2s_model_calls_carry_nothing_of_the_server(prefix: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Terminus-2 as a Trial makes it (Harbor's factory over Amber's configuration), calling a double in the
    model proxy's place: litellm and the openai SDK would fill the org and project headers from the server's
    environment, and nothing of it may reach the call, headers included."""
    canaries = _canaries(tmp_path)
    _set(canaries, monkeypatch)
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"model": "m", "tasks": {"t": [{"analysis": "a", "plan": "p", "commands": [],
                                                                  "task_complete": True}]}}))
    with ProviderDouble([load_replay(replay)], {"t": "Do the thing."}) as proxy:
        agent, _ = _built("terminus-2", tmp_path, prefix=prefix, proxy=proxy.anthropic_base_url)
        asyncio.run(agent._llm.call(prompt="Do the thing.", **agent._llm_call_kwargs))  # a turn's call, as it makes it
        (call,) = proxy.received
    assert call.headers.get("authorization", call.headers.get("x-api-key")).endswith("amber-trial-test")
    leaked = canaries.find(json.dumps(call.headers) + json.dumps(call.body))
    assert leaked == [], leaked


# ---- every Agent, end to end ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agent_images() -> None:
    """The installed Agents' software images, built side by side (once per content: usually there already)."""
    client = docker_engine.connect()
    installed = [a for a in AGENTS.values() if a.software is not None]
    with ThreadPoolExecutor(len(installed)) as pool:
        for spec in installed:
            pool.submit(agent_image.software_image, client, spec.name, spec.software)


@dataclass
class Given:
    """What the sandboxes were given, caught as the Docker SDK gave it: (what, text) pairs."""

    seen: list[tuple[str, str]] = field(default_factory=list)

    def spy(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Record each container's inspection once it exists, each command's line and environment, and each
        copy's bytes, from every Docker client of this process."""
        from docker.api.container import ContainerApiMixin
        from docker.api.exec_api import ExecApiMixin

        def wrap(cls: type, name: str, record: Callable[..., None]) -> None:
            original = getattr(cls, name)

            def spied(api: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(api, *args, **kwargs)
                record(api, result, *args, **kwargs)
                return result

            monkeypatch.setattr(cls, name, spied)

        def created(api: Any, result: dict, *args: Any, **kwargs: Any) -> None:
            inspected = api.inspect_container(result["Id"])
            self.seen.append((f"docker inspect {inspected['Name']}", json.dumps(inspected)))

        def executed(api: Any, result: dict, container: Any, cmd: Any, **kwargs: Any) -> None:
            self.seen.append((f"a command in {str(container)[:12]}",
                              json.dumps({"cmd": cmd, "env": kwargs.get("environment")})))

        def copied(api: Any, result: Any, container: Any, path: str, data: bytes) -> None:
            self.seen.append((f"a copy into {str(container)[:12]}:{path}", data.decode("latin-1")))

        wrap(ContainerApiMixin, "create_container", created)
        wrap(ExecApiMixin, "exec_create", executed)
        wrap(ContainerApiMixin, "put_archive", copied)

    def envs(self) -> list[dict[str, str]]:
        """The environment of every command run in a sandbox."""
        found = []
        for what, text in self.seen:
            if what.startswith("a command"):
                env = json.loads(text)["env"] or {}
                found.append(env if isinstance(env, dict) else dict(e.split("=", 1) for e in env))
        return found

    def commands(self) -> list[str]:
        """The command line of every command run in a sandbox."""
        return [json.dumps(json.loads(text)["cmd"]) for what, text in self.seen if what.startswith("a command")]


@pytest.mark.slow
@pytest.mark.docker
def test_no_value_of_the_servers_environment_reaches_a_trial(
        agent_images: None, tmp_path: Path, warehouse: Warehouse, amber_home: Path,
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    canaries = _canaries(tmp_path)
    bench = tmp_path / "bench"
    shutil.copytree(DEMO / TASK, bench / TASK)
    # The Task's own env tables ask for the server's key: a Harbor Task may (an LLM-judged Verifier, say).
    probe = '{ AMBER_PROBE = "${ANTHROPIC_API_KEY:-absent}" }'
    with (bench / TASK / "task.toml").open("a") as toml:
        toml.write(f"\n[solution]\nenv = {probe}\n")
    config = (bench / TASK / "task.toml").read_text()
    config = config.replace("[verifier]\n", f"[verifier]\nenv = {probe}\n").replace(
        "[environment]\n", f"[environment]\nenv = {probe}\n")
    (bench / TASK / "task.toml").write_text(config)

    script = json.loads(STRONG.read_text())["tasks"][TASK]
    replays = []
    for model in ("claude-haiku-4-5", "gpt-5-mini"):
        path = tmp_path / f"{model}.json"
        path.write_text(json.dumps({"model": model, "tasks": {TASK: script}}))
        replays.append(load_replay(path))
    instructions = {TASK: (bench / TASK / "instruction.md").read_text().strip()}
    monkeypatch.setenv("AMBER_SECRETS_FILE", str(tmp_path / "no-secrets.env"))
    given = Given()
    given.spy(monkeypatch)
    with ProviderDouble(replays, instructions, api_key=canaries.values["ANTHROPIC_API_KEY"]) as anthropic, \
            ProviderDouble(replays, instructions, api_key=canaries.values["OPENAI_API_KEY"]) as openai:
        monkeypatch.setenv("AMBER_ANTHROPIC_BASE_URL", anthropic.base_url)
        monkeypatch.setenv("AMBER_OPENAI_BASE_URL", openai.base_url)
        _set(canaries, monkeypatch)
        funded(warehouse, WS, "50")
        jobs = []
        for agent, mc in JOBS:
            _, job = lifecycle.submit(warehouse, WS, local_user(), request(str(bench), agent, [mc],
                                                                          bounds=agent == "terminus-2"))
            for cell in cells_of(warehouse, job.id):
                cell_run.run_cell_of_job(warehouse, job.id, cell.cell_key)
            jobs.append(job.id)
        upstream = [json.dumps(r.headers) + json.dumps(r.body) for d in (anthropic, openai) for r in d.received]

    with warehouse.query(WS) as con:
        trials = con.execute("select agent, outcome, reward, error_message from trials where job_id in "
                             f"({', '.join('?' * len(jobs))})", jobs).fetchall()
        transcripts = json.dumps(con.execute("select request, response from transcripts").fetchall())
    out, err = capfd.readouterr()
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)

    # Where each canary turned up: nowhere, but the Provider keys at the Providers.
    found: dict[str, set[str]] = {}
    for what, text in given.seen:
        for name in canaries.find(text):
            found.setdefault(name, set()).add(what)
    for path, kind, blob in stored_contents(amber_home):
        for name in canaries.find(blob):
            found.setdefault(name, set()).add(f"{path.relative_to(amber_home)} ({kind})")
    for what, text in (("the transcripts (SQL)", transcripts), ("the logs", logged), ("what was printed", out + err)):
        for name in canaries.find(text):
            found.setdefault(name, set()).add(what)
    for env in given.envs():
        for name in set(env) & set(FLAGS):
            found.setdefault(name, set()).add("a command's environment")
    for command in given.commands():
        for name, (_, written) in TYPED.items():
            if written in command:
                found.setdefault(name, set()).add("a command's line")
    assert found == {}, "\n".join(f"{name}: {sorted(where)}" for name, where in sorted(found.items()))

    # And the search looked where it had to: each sandbox's configuration and commands, each Agent's token in its
    # commands, the Task's env tables filled as if the server had no such variable, the Providers called.
    assert {get_job(warehouse, job, WS).status for job in jobs} == {"completed"}
    assert {agent: reward for agent, _, reward, _ in trials} == REWARDS, trials
    assert {outcome for _, outcome, _, _ in trials} == {"scored"}, trials
    assert sum(what.startswith("docker inspect") for what, _ in given.seen) >= len(REWARDS)
    envs = given.envs()
    assert sum(any(v.startswith("amber-trial-") for v in env.values()) for env in envs) >= 4
    assert {env.get("AMBER_PROBE") for env in envs} >= {"absent"}
    assert "Summarize errors per service" in transcripts
    for key in PROVIDER_KEYS:
        assert any(canaries.values[key] in call for call in upstream), key
    assert any((amber_home / "runs").rglob("trial.log"))  # the Trial folders were among the files searched
