"""`--json` of the analysis commands, held to golden files, so a change to how results are computed or shaped
cannot change what scripts read without a golden file saying so.

Each case runs one command in this process (`helpers.cli`), on the embedded default and again as the client of
`amber serve` (`cli_mode`): both must print the same text, byte for byte, as its file in `tests/golden/json/`
(key order and float formatting included). Inputs are deterministic: the real Harbor job folders of
`tests/golden` (imported, so both modes name them `harbor:<folder>`), the demo Benchmark, the judge's replay, and
one Amber Job whose Trial rows are written here. The one thing normalised is the Amber Job's id, which is random
(`<job>`). Regenerate after a deliberate change with `AMBER_WRITE_GOLDEN=1 .venv/bin/python -m pytest
tests/test_json_golden.py` and add a note to `tests/golden/json/README.md`.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from helpers import cli, funded, ok, request

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.analysis import sources
from amber_pipeline.cells import cell_file_id
from amber_pipeline.jobs import lifecycle, records
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

pytestmark = pytest.mark.usefixtures("cli_mode")

GOLDEN = PROJECT_ROOT / "tests" / "golden"
FILES = GOLDEN / "json"
DEMO = PROJECT_ROOT / "examples" / "demo-bench"
WRITE = os.environ.get("AMBER_WRITE_GOLDEN") == "1"
FOLDERS = ("demo-bounds", "demo-terminus", "demo-edited", "demo-broken")

BOARD = [{"agent": "a0", "model": "m0", "pass_rate": 90, "trials_per_task": 5},
         {"agent": "a1", "model": "m1", "pass_rate": "55.5%", "trials_per_task": 1},
         {"agent": "a2", "model": "m2", "pass_rate": 20}]
CAUSE_LABELS = {"count-log-errors__KnH5ndg": "dead_tools", "fix-off-by-one__Qqqcgxw": "other",
                "fix-backup-script__pqfZuZS": "early_stops", "not-a-trial": "other"}
STAGE_LABELS = {"count-log-errors__Xnsg32Z": "understand", "fix-backup-script__2QQs7jH": "write",
                "fix-off-by-one__f8X6Cic": "write"}

# Each case: its command line, {name} filled from `Inputs`.
CASES = {
    "report-bounds": ["report", "harbor:demo-bounds", "--json"],
    "report-terminus": ["report", "harbor:demo-terminus", "--json"],
    "report-edited": ["report", "harbor:demo-edited", "--json"],
    "report-broken": ["report", "harbor:demo-broken", "--json"],
    "report-broken-tasks-labels": ["report", "harbor:demo-broken", "--json", "--tasks", "{demo}", "--labels",
                                   "{labels}"],
    "report-job": ["report", "{job}", "--json"],
    "results-job": ["results", "{job}", "--json"],
    "results-job-cancelled": ["results", "{cancelled}", "--json"],
    "report-job-cancelled": ["report", "{cancelled}", "--json"],
    "compare-terminus-broken": ["compare", "harbor:demo-terminus", "harbor:demo-broken", "--json"],
    "compare-bounds-oracle-nop": ["compare", "harbor:demo-bounds", "harbor:demo-bounds", "--route", "oracle",
                                  "--route", "nop", "--margin-points", "20", "--json"],
    "compare-bounds-itself": ["compare", "harbor:demo-bounds", "harbor:demo-bounds", "--json"],
    "compare-many": ["compare", "harbor:demo-terminus", "harbor:demo-broken", "harbor:demo-edited",
                     "--margin-points", "10", "--json"],
    "leaderboard-bounds-oracle": ["leaderboard", "harbor:demo-bounds", "--board", "{board}", "--route", "oracle",
                                  "--total-tasks", "8", "--json"],
    "leaderboard-terminus": ["leaderboard", "harbor:demo-terminus", "--board", "{board}", "--json"],
    "plan-change": ["plan", "--tasks", "100", "--rate", "60", "--flip-share", "20", "--change", "10", "--json"],
    "plan-impossible-change": ["plan", "--tasks", "50", "--flip-share", "10", "--change", "15", "--json"],
    "plan-one-task": ["plan", "--tasks", "1", "--flip-share", "100", "--json"],
    "judge-labels": ["judge", "harbor:demo-judged", "--model", "judge-replay", "--stage-labels", "{stages}",
                     "--json"],
    "judge-one-sample": ["judge", "harbor:demo-judged", "--model", "judge-replay", "--samples", "1", "--json"],
}


@dataclass(frozen=True)
class Inputs:
    demo: str
    labels: str
    stages: str
    board: str
    job: str  # a Job with two cells over two Tasks, one Agent's token count off the proxy's
    cancelled: str  # the same, cancelled: its other Tasks are missing

    def fill(self, args: list[str]) -> list[str]:
        return [a.format(**self.__dict__) for a in args]


def write_job(wh: Warehouse, counted: dict[str, int], cancel: bool) -> str:
    """A Job of terminus-2 with replay-strong and replay-weak over the demo Benchmark, its Trial rows on two
    Tasks written here (`counted`: the input tokens each cell's Agent says it used, per Trial)."""
    made = lifecycle.quote(wh, "default", local_user(), request(str(DEMO), "terminus-2",
                                                                ["replay-strong", "replay-weak"]))
    job = records.get_job(wh, made.job_id, "default")
    at = datetime(2030, 1, 1, tzinfo=UTC)
    for cell in records.cells_of(wh, job.id):
        name = cell.model_configuration.split("@")[0]
        rows = [TrialRecord(workspace="default", job_id=job.id, cell_key=cell.cell_key,
                            benchmark_version_id=job.benchmark_version_id, task_name=task, attempt=1,
                            trial_name=f"{task}__1", agent="terminus-2", agent_version="v", model_configuration=name,
                            outcome="scored", reward=reward, errored=False, retries=0, error_type=None,
                            error_message=None, input_tokens=1_000, output_tokens=100, cost_usd=0.01 * (i + 1),
                            started_at=at, finished_at=at + timedelta(seconds=4 + i), duration_sec=4.0 + i,
                            image_id=None, trial_dir=str(wh.paths.runs / job.id / "none" / f"{task}__1"),
                            agent_input_tokens=counted[name], agent_output_tokens=100)
                for i, (task, reward) in enumerate((("fix-off-by-one", 1.0),
                                                    ("ini-port-change", float(name == "replay-strong"))))]
        wh.write_parquet(trials_table(rows), wh.trials_file(cell_file_id(cell.cell_key), job.id))
    if cancel:
        lifecycle.start(wh, "default", made.id)
        lifecycle.cancel(wh, "default", job.id)
    return job.id


@pytest.fixture
def inputs(tmp_path: Path, warehouse: Warehouse) -> Inputs:
    """The golden Harbor folders imported (a copy of demo-terminus as demo-judged, its Trials pointing at the demo
    Benchmark's Tasks, for the judge to read), the label and board files, and two Amber Jobs."""
    jobs = tmp_path / "jobs"
    for name in FOLDERS:
        shutil.copytree(GOLDEN / name, jobs / name)
    shutil.copytree(GOLDEN / "demo-terminus", jobs / "demo-judged")
    for config in (jobs / "demo-judged").glob("*__*/config.json"):
        data = json.loads(config.read_text())
        data["task"]["path"] = str(DEMO / config.parent.name.split("__")[0])
        config.write_text(json.dumps(data))
    for folder in jobs.iterdir():
        sources.import_harbor(warehouse, "default", folder)
    files = {"labels": CAUSE_LABELS, "stages": STAGE_LABELS, "board": BOARD}
    for name, data in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    funded(warehouse)
    return Inputs(demo=str(DEMO), labels=str(tmp_path / "labels.json"), stages=str(tmp_path / "stages.json"),
                  board=str(tmp_path / "board.json"),
                  job=write_job(warehouse, {"replay-strong": 1_150, "replay-weak": 1_000}, cancel=False),
                  cancelled=write_job(warehouse, {"replay-strong": 1_000, "replay-weak": 1_000}, cancel=True))


def printed(inputs: Inputs, case: str) -> str:
    """What the case's command prints on stdout, its Jobs' ids made `<job>`."""
    args = inputs.fill(CASES[case])
    result = cli(*args)
    if args[0] == "report":  # it also says on stderr where it wrote the file, and nothing else
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        assert result.stderr.startswith("Wrote ") and result.stderr.count("\n") == 1, result.stderr
        text = result.stdout
    else:
        text = ok(result)
    return text.replace(inputs.job, "<job>").replace(inputs.cancelled, "<job>")


def test_every_case_has_a_golden_file_and_every_file_a_case() -> None:
    assert {p.stem for p in FILES.glob("*.json")} == set(CASES)


def test_json_output_is_the_golden_file(inputs: Inputs, cli_mode: str) -> None:
    """Every case at once: the fixture's imports and Jobs are made once for all of them."""
    differs: dict[str, list[str]] = {}
    for case in CASES:
        text = printed(inputs, case)
        json.loads(text)  # whole, valid JSON
        golden = FILES / f"{case}.json"
        if WRITE and cli_mode == "local":
            golden.write_text(text)
        elif (expected := golden.read_text()) != text:
            differs[case] = list(difflib.unified_diff(expected.splitlines(), text.splitlines(), golden.name,
                                                      "printed", n=2, lineterm=""))
    assert not differs, f"--json differs from its golden file: {list(differs)}\n" + "\n".join(
        "\n".join(diff[:40]) for diff in differs.values())
