"""What the benches share: synthetic Trial rows in the stored schema, and timing a fresh interpreter."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from amber_pipeline.cells import Cell
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.schemas import SCHEMA_VERSION, TRIAL_SCHEMA


@dataclass(frozen=True)
class Trials:
    """One cell's Trials of one Job, column by column (``task`` indexes Task names ``task-0000``...)."""

    task: np.ndarray
    attempt: np.ndarray
    reward: np.ndarray
    errored: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    cost_usd: np.ndarray
    duration_sec: np.ndarray


def trial_table(cell: Cell, workspace: str, job_id: str, benchmark_version_id: str, trials: Trials,
                started: datetime, error_type: str, seconds_apart: int = 60) -> pa.Table:
    """The Trial rows a cell run would store (an Errored Trial has no Reward)."""
    n = trials.task.size
    errored = trials.errored
    start_us = np.int64(started.timestamp() * 1e6) + np.arange(n, dtype=np.int64) * seconds_apart * 1_000_000
    names = [f"task-{t:04d}" for t in range(int(trials.task.max(initial=-1)) + 1)]
    trial_names = [f"task-{t:04d}__{a}" for t, a in zip(trials.task.tolist(), trials.attempt.tolist(), strict=True)]
    cols = {
        "schema_version": pa.array(np.full(n, SCHEMA_VERSION, dtype=np.int32)),
        "workspace": pa.array([workspace] * n), "job_id": pa.array([job_id] * n),
        "cell_key": pa.array([cell.key] * n), "benchmark_version_id": pa.array([benchmark_version_id] * n),
        "task_name": pa.array(names).take(pa.array(trials.task)), "attempt": pa.array(trials.attempt),
        "trial_name": pa.array(trial_names),
        "agent": pa.array([cell.agent] * n), "agent_version": pa.array([cell.agent_spec_id] * n),
        "model_configuration": pa.array([cell.model_configuration] * n),
        "outcome": pa.array(np.where(errored, "errored", "scored").tolist()),
        "reward": pa.array(np.where(errored, np.nan, trials.reward), mask=errored), "errored": pa.array(errored),
        "retries": pa.array(np.where(errored, 2, 0).astype(np.int32)),
        "error_type": pa.array(np.where(errored, error_type, "").tolist(), mask=~errored),
        "error_message": pa.array(np.where(errored, error_type, "").tolist(), mask=~errored),
        "input_tokens": pa.array(trials.input_tokens), "output_tokens": pa.array(trials.output_tokens),
        "cost_usd": pa.array(np.where(errored, 0.0, trials.cost_usd)),  # an Errored Trial is not charged
        "started_at": pa.array(start_us, type=pa.timestamp("us", tz="UTC")),
        "finished_at": pa.array(start_us + (trials.duration_sec * 1e6).astype(np.int64),
                                type=pa.timestamp("us", tz="UTC")),
        "duration_sec": pa.array(trials.duration_sec), "image_id": pa.array(["sha256:bench"] * n),
        "trial_dir": pa.array([f"runs/{job_id}/{cell.file_id}/{t}" for t in trial_names]),
        "cached_input_tokens": pa.array(np.zeros(n, dtype=np.int64)), "model_calls": pa.array(np.ones(n, np.int32)),
        "agent_input_tokens": pa.array(trials.input_tokens), "agent_output_tokens": pa.array(trials.output_tokens),
        "agent_cost_usd": pa.nulls(n, pa.float64()),
        # a Task's content hash stands in as the hash of its name; where a Trial's time went is unknown, as in
        # older rows
        "task_hash": pa.array([hashlib.sha256(t.encode()).hexdigest() for t in names]).take(pa.array(trials.task)),
        **{phase: pa.nulls(n, pa.float64()) for phase in ("image_sec", "environment_sec", "agent_sec", "verifier_sec")},
    }
    return pa.Table.from_pydict(cols, schema=TRIAL_SCHEMA)


def run_child(script: str, args: list[str]) -> dict:
    """One fresh interpreter; its JSON line plus its whole wall time (start-up and imports included)."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=PROJECT_ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"child failed:\n{done.stderr}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall"] = wall
    return out


@contextlib.contextmanager
def scratch_home(prefix: str, keep: bool) -> Iterator[Path]:
    """A temporary AMBER_HOME for one bench run, removed afterwards unless ``keep``."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["AMBER_HOME"] = str(home)
    try:
        yield home
    finally:
        if keep:
            print(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
