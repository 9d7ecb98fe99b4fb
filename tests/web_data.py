"""What the web app's browser tests and bench/web_pages.py serve: the app itself on loopback, and Jobs made the way
users get them.

`Served` runs `python -m server`'s app (`server.__main__.app`: the API, the Dagster UI mounted lazily, the web pages
at /) on uvicorn in a thread of this process, over an AMBER_HOME. `finished_job` quotes, starts and runs a Job of
static Tasks with the Direct Agent in this process, as a cell run does (`cell_run.run_cell_of_job`), so its Trials,
charges, transcripts and scores are the real ones. `ScriptedModel` is a Model Configuration of a Workspace
(openai-compatible) answered by Amber's provider double on loopback from a script given here, for model output a
test chooses.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import uvicorn

from amber_pipeline.accounts import tokens, users, workspaces
from amber_pipeline.accounts.identity import Actor, local_user
from amber_pipeline.benchmarks import static
from amber_pipeline.cells import cell_file_id
from amber_pipeline.jobs import cell_run, lifecycle, records
from amber_pipeline.jobs.records import Job
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.models import configurations
from amber_pipeline.models.configurations import ModelConfiguration, Prices
from amber_pipeline.models.provider_double import ProviderDouble, load_replay
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TRANSCRIPT_SCHEMA, TrialRecord, trials_table

STATIC_BENCH = PROJECT_ROOT / "examples" / "static-bench"
STARTUP_S = 30


@dataclass
class Served:
    """`server.__main__.app(paths, local=local)` on uvicorn on a free loopback port, once it answers."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str

    @classmethod
    @contextmanager
    def running(cls, paths: AmberPaths, *, local: bool) -> Iterator[Served]:
        from server.__main__ import app

        server = uvicorn.Server(uvicorn.Config(app(paths, local=local), host="127.0.0.1", port=0, log_level="warning",
                                               lifespan="on", ws="websockets-sansio"))
        thread = threading.Thread(target=server.run, name="amber-web", daemon=True)
        thread.start()
        deadline = time.monotonic() + STARTUP_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the web server did not start")
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield cls(server, thread, f"http://127.0.0.1:{port}")
        finally:
            server.should_exit = True
            thread.join(timeout=30)


@contextmanager
def two_members(root: Path) -> Iterator[tuple[Warehouse, str, str]]:
    """An instance in `root` (AMBER_HOME and AMBER_CONFIG there while the context is open) with alice, a member of
    Workspace alpha, and bob, of beta, each with a funded Wallet; their API tokens."""
    import pytest

    with pytest.MonkeyPatch.context() as env:
        env.setenv("AMBER_HOME", str(root / "amber"))
        env.setenv("AMBER_CONFIG", str(root / "amber-config.toml"))
        env.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        wh = Warehouse(AmberPaths.from_env())
        yield wh, member(wh, "alice", "alpha"), member(wh, "bob", "beta")


def member(wh: Warehouse, user: str, workspace: str, credit: str = "100") -> str:
    """`user` (made if new) with a Workspace of their own holding a Credit; their API token's secret."""
    users.add(wh, user, "tests")
    workspaces.create(wh, Actor(user, None), workspace)
    wallet.add_credit(wh, Actor(local_user(), None), workspace, credit, "test credit")
    return tokens.create(wh, user).secret


def copy_tasks(target: Path, names: list[str] | None = None, source: Path = STATIC_BENCH) -> Path:
    """A Benchmark folder of some of the static example's Tasks (all of them by default)."""
    for task in sorted(source.iterdir()):
        if (task / "task.toml").is_file() and (names is None or task.name in names):
            shutil.copytree(task, target / task.name)
    return target


def finished_job(wh: Warehouse, workspace: str, user: str, bench: Path | str, models: list[str],
                 agent: str = "direct", trials: int = 1) -> Job:
    """A Job quoted, started and run to its end in this process, every cell as its cell run would."""
    request = JobRequest(benchmark=str(bench), agent=agent, model_configurations=models, trials_per_task=trials)
    _, job = lifecycle.submit(wh, workspace, user, request)
    for cell in records.cells_of(wh, job.id):
        cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
    return records.get_job(wh, job.id, workspace)


def static_task(root: Path, name: str, instruction: str, contains: str) -> Path:
    """A static Task whose answer passes when it contains `contains`."""
    folder = root / name
    folder.mkdir(parents=True)
    checks = f"[metadata.amber.static]\ncontains = [{json.dumps(contains)}]\n"
    (folder / "task.toml").write_text(f'version = "1.0"\n\n{checks}')
    (folder / "instruction.md").write_text(instruction)
    return folder


@dataclass
class ScriptedModel:
    """A Workspace's openai-compatible Model Configuration `name`, whose replies are `replies[task]` (one per turn
    of the Task's Instruction), served by the provider double on loopback while the context is open."""

    name: str
    double: ProviderDouble

    @classmethod
    @contextmanager
    def serving(cls, wh: Warehouse, workspace: str, name: str, bench: Path,
                replies: dict[str, list[str]], scratch: Path) -> Iterator[ScriptedModel]:
        key_env = "AMBER_WEB_TEST_KEY"
        key = f"sk-amber-web-{secrets.token_hex(12)}"
        replay = scratch / f"{name}-replay.json"
        replay.write_text(json.dumps({"model": name, "tasks": replies}))
        instructions = {d.name: static.turns((d / "instruction.md").read_text())[0]
                        for d in sorted(bench.iterdir()) if (d / "instruction.md").is_file()}
        before = {var: os.environ.get(var) for var in (key_env, "AMBER_SECRETS_FILE")}
        os.environ[key_env] = key
        os.environ["AMBER_SECRETS_FILE"] = str(scratch / "no-secrets.env")  # never the developer's file
        try:
            with ProviderDouble([load_replay(replay)], instructions, api_key=key) as double:
                configurations.add(wh.paths, workspace, ModelConfiguration(
                    name=name, model=name, provider="openai-compatible", base_url=double.base_url, key_env=key_env,
                    prices=Prices(input=1.0, cached_input=0.1, output=2.0, source="made up for the web tests")))
                yield cls(name, double)
        finally:
            for var, value in before.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value


# ---------------------------------------------------------------- a synthetic Job, through the real storage


def harbor_trial_folder(folder: Path, task: str, trial: str, steps: int, started: datetime,
                        reward: float | None, said: str = "") -> Path:
    """A sandboxed Trial's folder as Harbor 0.25 writes it: result.json (phase timings, the Verifier's Rewards),
    agent/trajectory.json (ATIF-v1.8: the user's Instruction, then agent steps, each calling a tool and reading
    what came back; the first agent step's message ends with `said`) and the Verifier's stdout."""
    (folder / "agent").mkdir(parents=True, exist_ok=True)
    (folder / "verifier").mkdir(exist_ok=True)
    at = [started + timedelta(seconds=s) for s in (0, 4, 5, 6 + steps, 8 + steps, 9 + steps)]
    phases = dict(zip(("environment_setup", "agent_setup", "agent_execution", "verifier"),
                      ({"started_at": at[i].isoformat(), "finished_at": at[i + 1].isoformat()} for i in range(4)),
                      strict=True))
    (folder / "result.json").write_text(json.dumps({
        "id": str(uuid.uuid4()), "task_name": task, "trial_name": trial, "trial_uri": folder.as_uri(),
        "task_id": {"path": f"tasks/{task}"}, "source": None, "task_checksum": "0" * 64,
        "agent_info": {"name": "terminus-2", "version": "2.0.0", "model_info": {"name": "model", "provider": None}},
        "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
        "exception_info": None, "started_at": at[0].isoformat(), "finished_at": at[5].isoformat(), **phases},
        indent=4))
    atif: list[dict[str, Any]] = [{"step_id": 1, "timestamp": at[2].isoformat(), "source": "user",
                                   "message": f"Solve the Task {task}."}]
    for i in range(2, steps + 1):
        call = f"call_{i}"
        atif.append({
            "step_id": i, "timestamp": (at[2] + timedelta(seconds=i)).isoformat(), "source": "agent",
            "model_name": "model",
            "message": f"Step {i}: I look at the files again and run the tests.{' ' + said if i == 2 else ''}",
            "reasoning_content": f"The output of step {i - 1} says what is left to fix.",
            "tool_calls": [{"tool_call_id": call, "function_name": "bash",
                            "arguments": {"command": f"ls -la /app && python -m pytest -q tests/ -k case_{i}"}}],
            "observation": {"results": [{"source_call_id": call,
                                         "content": f"total 12\n-rw-r--r-- 1 root root 120 main.py\n{i} passed"}]},
            "metrics": {"prompt_tokens": 1000 + 40 * i, "completion_tokens": 60, "cached_tokens": 800,
                        "cost_usd": 0.001}})
    (folder / "agent" / "trajectory.json").write_text(json.dumps({
        "schema_version": "ATIF-v1.8", "session_id": trial,
        "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "model"}, "steps": atif}, indent=2))
    (folder / "verifier" / "test-stdout.txt").write_text(f"{steps} passed\n")
    (folder / "verifier" / "reward.txt").write_text(f"{reward if reward is not None else 0}\n")
    return folder


@dataclass(frozen=True)
class Synthetic:
    job: Job
    trial: str  # the Trial with a Harbor folder (its trajectory), in the first cell
    cell_key: str


def synthetic_job(wh: Warehouse, workspace: str, user: str, root: Path, cells: int, tasks: int,
                  steps: int, seed: int = 7, said: str = "") -> Synthetic:
    """A finished Job of `cells` cells (the Direct Agent with as many Model Configurations of the Workspace) over
    `tasks` static Tasks, quoted and started as any Job, whose Trial rows are made up here instead of run: written
    to the cell's Trial file, charged and scored by the real code, as a cell run does. The first Trial of the
    first cell has a Harbor folder with a trajectory of `steps` steps (its first agent message ending with `said`)
    and as many model calls in the transcripts."""
    rng = random.Random(seed)
    bench = root / f"synthetic-{cells}x{tasks}"
    for i in range(tasks):
        static_task(bench, f"task-{i:04d}", f"Task {i}: what is {i} plus zero?\n", str(i))
    models = []
    for m in range(cells):
        name = f"model-{m:02d}"
        configurations.add(wh.paths, workspace, ModelConfiguration(
            name=name, model="replay-strong", provider="replay", replay="replay-strong.json",
            prices=Prices(input=1.0 + m, cached_input=0.1, output=2.0 + m, source="made up for the web bench")))
        models.append(name)
    _, job = lifecycle.submit(wh, workspace, user, JobRequest(benchmark=str(bench), agent="direct",
                                                              model_configurations=models))
    started = datetime.now(UTC) - timedelta(hours=1)
    keys = [c.cell_key for c in records.cells_of(wh, job.id)]
    traced = ""
    for n, key in enumerate(keys):
        run = lifecycle.open_cell_run(wh, job.id, key)
        assert lifecycle.start_cell(wh, job.id, key)
        skill = 0.3 + 0.6 * n / max(cells - 1, 1)
        made = []
        for i, task in enumerate(run.benchmark.tasks):
            trial = f"{task.name}__1"
            at = started + timedelta(seconds=i)
            reward = 1.0 if rng.random() < skill else 0.0
            folder = ""
            if n == 0 and i == 0:
                folder = str(harbor_trial_folder(run.run_dir / trial, task.name, trial, steps, at, reward, said))
                traced = trial
            made.append(TrialRecord(
                workspace=workspace, job_id=job.id, cell_key=key, benchmark_version_id=run.benchmark.id,
                task_name=task.name, attempt=1, trial_name=trial, agent=run.cell.agent,
                agent_version=run.cell.agent_spec_id, model_configuration=models[n], outcome="scored", reward=reward,
                errored=False, retries=0, error_type=None, error_message=None, input_tokens=400, output_tokens=60,
                cost_usd=0.0005, started_at=at, finished_at=at + timedelta(seconds=2), duration_sec=2.0,
                image_id=None, trial_dir=folder, model_calls=1, task_hash=run.benchmark.task_hash(task)))
        wh.write_parquet(trials_table(made), wh.trials_file(run.cell.file_id, job.id))
        lifecycle.charge_records(wh, job.id, made)
        if n == 0:
            _transcripts(wh, made[0], steps)
        cell_run.store_results(wh, key, job.id)
    return Synthetic(records.get_job(wh, job.id, workspace), traced, keys[0])


def _transcripts(wh: Warehouse, record: TrialRecord, calls: int) -> None:
    """The model proxy's transcript of `calls` calls of the Trial, in its cell's file of the day."""
    rows = []
    for seq in range(calls):
        at = record.started_at + timedelta(seconds=seq)
        rows.append({
            "workspace": record.workspace, "job_id": record.job_id, "cell_key": record.cell_key,
            "trial_key": record.key, "retry": 0, "seq": seq, "wire": "chat", "started_at": at, "duration_ms": 850.0,
            "status": 200, "streamed": False,
            "request": json.dumps({"model": "model", "messages": [{"role": "user", "content": f"call {seq}"}]}),
            "response": json.dumps({"choices": [{"message": {"role": "assistant", "content": f"answer {seq}"}}]}),
            "input_tokens": 1000, "cached_input_tokens": 800, "output_tokens": 60, "served_by": "amber-double",
            "signal": None})
    wh.write_parquet(pa.Table.from_pylist(rows, schema=TRANSCRIPT_SCHEMA),
                     wh.transcripts_file(record.started_at.date(), cell_file_id(record.cell_key), record.job_id))
