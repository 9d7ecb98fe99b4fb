"""Jobs that stop once decided, for the tests: a static Benchmark of yes-or-no Tasks, and replay models of known
skill on it, served by the provider double on loopback.

`sharp` answers every Task right; `shaky` answers right on SHAKY_SHARE of the Tasks (the same ones for every
attempt); `sharp-twin` answers as `sharp` does. `run_job` runs a Job's cells at once, each in a thread, as the
daemon's two run slots do, so each cell's decision sees the other's Trials as they are stored.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers import funded

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.jobs import cell_run, lifecycle
from amber_pipeline.jobs.records import Job, cells_of, get_job
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.models import configurations
from amber_pipeline.models.configurations import ModelConfiguration, Prices
from amber_pipeline.models.provider_double import ProviderDouble, load_replay
from amber_pipeline.models.provider_double.faults import Fault
from amber_pipeline.warehouse.catalog import Warehouse

N_TASKS = 200
SHAKY_SHARE = 0.4  # sharp minus shaky: 60 points on every Version's Task set
MODELS = ("sharp", "shaky", "sharp-twin")
REPLY_SEC = 0.2


def shaky_right(task: str) -> bool:
    return hashlib.sha256(task.encode()).digest()[0] < 256 * SHAKY_SHARE


@contextmanager
def yes_no_bench(root: Path, wh: Warehouse, n_tasks: int = N_TASKS, reply_sec: float = REPLY_SEC) -> Iterator[Path]:
    """A folder of ``n_tasks`` static Tasks, and the three models added to the default Workspace while the double
    serving them runs, each reply ``reply_sec`` after its call (a model takes its time: a double that answers at
    once runs a Job's every Trial before the first decision is stored)."""
    bench = root / "yes-no"
    instructions, answers = {}, {}
    for i in range(n_tasks):
        task = bench / f"q-{i:03d}"
        task.mkdir(parents=True)
        (task / "task.toml").write_text(f'version = "1.0"\n\n[metadata.amber.static]\nnumber = {i + 7}\n')
        instructions[task.name] = f"Question {i:03d}: what is {i} plus seven?"
        (task / "instruction.md").write_text(instructions[task.name] + "\n")
        answers[task.name] = i + 7
    replays = []
    for model in MODELS:
        wrong = model == "shaky"
        scripts = {t: [str(a if not wrong or shaky_right(t) else a + 1)] for t, a in answers.items()}
        replay = root / f"{model}.json"
        replay.write_text(json.dumps({"model": model, "tasks": scripts}))
        replays.append(load_replay(replay))
    with ProviderDouble(replays, instructions) as double:
        if reply_sec:
            double.inject(Fault("slow", count=10**9, delay_sec=reply_sec))
        for model in MODELS:
            configurations.add(wh.paths, DEFAULT_WORKSPACE, ModelConfiguration(
                name=model, model=model, provider="openai-compatible", base_url=double.base_url,
                prices=Prices(input=1.0, cached_input=0.1, output=10.0, source="made up for the test")))
        yield bench


def stopping_request(bench: Path, models: list[str], trials: int = 1, margin: float | None = None,
                     seed: int | None = None, stop: bool = True) -> JobRequest:
    return JobRequest(benchmark=str(bench), agent="direct", model_configurations=models, trials_per_task=trials,
                      stop_when_decided=stop, margin_points=margin, order_seed=seed)


def run_job(wh: Warehouse, request: JobRequest) -> Job:
    """Quote and start the Job in a funded default Workspace, run its cells at once, and give the ended Job."""
    funded(wh, DEFAULT_WORKSPACE, "100")
    _, job = lifecycle.submit(wh, DEFAULT_WORKSPACE, local_user(), request)
    failures: list[BaseException] = []

    def run(cell_key: str) -> None:
        try:
            cell_run.run_cell_of_job(wh, job.id, cell_key)
        except BaseException as exc:  # noqa: BLE001 - reported below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(c.cell_key,)) for c in cells_of(wh, job.id)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    return get_job(wh, job.id, DEFAULT_WORKSPACE)
