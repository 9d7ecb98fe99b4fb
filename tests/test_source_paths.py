"""Paths are not permissions: a folder inside Amber's home is readable (and writable) only as a run folder of
one of the acting Workspace's own Jobs; any other reads exactly like a folder that does not exist.

Workspace b (bob) has a real, finished Job (the oracle on one Task, in Docker); alice acts in Workspace a and
names b's run folder every way a path can name it. Every command runs in this process through Typer's runner.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import cli, ok, refusal, request

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.analysis import source_paths
from amber_pipeline.jobs import cell_run, lifecycle, records
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

GOLDEN = Path(__file__).parent / "golden"
TASK = PROJECT_ROOT / "examples" / "demo-bench" / "ini-port-change"


@dataclass(frozen=True)
class Instance:
    home: Path
    tmp: Path  # outside the home
    wh: Warehouse
    job: str  # b's Job
    run: Path  # b's run folder, runs/<job>
    cell: Path  # its one cell folder, a Harbor job folder of Trial folders


def amber_at(home: Path, tmp: Path, user: str, *args: str):
    """`amber --user USER --workspace (a for alice, b for bob) ARGS` on that home, with USER's own config file."""
    workspace = {"alice": "a", "bob": "b"}.get(user)
    chosen = ("--workspace", workspace) if workspace else ()
    return cli("--user", user, *chosen, *args, env={"AMBER_HOME": str(home), "AMBER_CONFIG": str(tmp / f"{user}.toml")})


def amber(inst: Instance, user: str, *args: str):
    return amber_at(inst.home, inst.tmp, user, *args)


def tree(folder: Path) -> dict[str, str]:
    """Every entry under a folder with its content's hash (a link: its target), to see that nothing changed."""
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        found[rel] = (f"-> {os.readlink(path)}" if path.is_symlink() else "dir" if path.is_dir()
                      else hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def same_sentence(refused: str, path: str, missing: str, missing_path: str) -> bool:
    return refused.replace(path, "PATH") == missing.replace(missing_path, "PATH")


def imported_rows(inst: Instance, workspace: str) -> int:
    """The Workspace's rows of the imported_trials view."""
    with inst.wh.query(workspace) as con:
        row = con.execute("select count(*) from imported_trials").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture(scope="module")
def inst(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    tmp = tmp_path_factory.mktemp("paths")
    home = tmp / "amber"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_HOME", str(home))
        wh = Warehouse(AmberPaths.from_env())
        ok(amber_at(home, tmp, "alice", "workspace", "create", "a"))
        ok(amber_at(home, tmp, "bob", "workspace", "create", "b"))
        for ws in ("a", "b"):
            ok(amber_at(home, tmp, local_user(), "--workspace", ws, "credit", "add", "--amount", "10", "--reason", "t"))
        (tmp / "board.csv").write_text("agent,model,pass_rate,trials_per_task\nx,y,50,1\n")
        shutil.copytree(TASK, tmp / "bench" / TASK.name)
        _, job = lifecycle.submit(wh, "b", "bob", request(str(tmp / "bench"), "oracle"))
        for cell in records.cells_of(wh, job.id):
            cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
        [cell_dir] = (wh.paths.runs / job.id).iterdir()
        assert list(cell_dir.glob("*/result.json"))
        (tmp / "link-to-b").symlink_to(cell_dir)
        yield Instance(home, tmp, wh, job.id, wh.paths.runs / job.id, cell_dir)


def names_of_b(inst: Instance) -> dict[str, str]:
    """Every way of naming b's run folder (and a place of the home that is no run folder)."""
    return {
        "the run folder": str(inst.run),
        "its cell": str(inst.cell),
        "a link from outside": str(inst.tmp / "link-to-b"),
        "a .. path": str(inst.tmp / "bench" / ".." / inst.home.name / "runs" / inst.job / inst.cell.name),
        "the warehouse": str(inst.wh.paths.warehouse),
        "the home": str(inst.home),
    }


@pytest.mark.docker
def test_another_workspaces_folders_read_like_missing_ones(inst: Instance) -> None:
    before = tree(inst.run)
    missing = str(inst.tmp / "no-such-folder")
    said = {
        "report": refusal(amber(inst, "alice", "report", missing)),
        "report --json": refusal(amber(inst, "alice", "report", missing, "--json")),
        "import-harbor": refusal(amber(inst, "alice", "import-harbor", missing)),
        "compare": refusal(amber(inst, "alice", "compare", str(GOLDEN / "demo-bounds"), missing)),
        "leaderboard": refusal(amber(inst, "alice", "leaderboard", missing, "--board", str(inst.tmp / "board.csv"))),
        "judge": refusal(amber(inst, "alice", "judge", missing, "--model", "judge-replay")),
    }
    assert said["import-harbor"].startswith("No Harbor job folder at ")
    assert said["report"].startswith("Unknown source ")
    for how, path in names_of_b(inst).items():
        runs = {
            "report": amber(inst, "alice", "report", path),
            "report --json": amber(inst, "alice", "report", path, "--json"),
            "import-harbor": amber(inst, "alice", "import-harbor", path),
            "compare": amber(inst, "alice", "compare", str(GOLDEN / "demo-bounds"), path),
            "leaderboard": amber(inst, "alice", "leaderboard", path, "--board", str(inst.tmp / "board.csv")),
            "judge": amber(inst, "alice", "judge", path, "--model", "judge-replay"),
        }
        for command, result in runs.items():
            assert same_sentence(refusal(result), path, said[command], missing), (how, command, result.stderr)
    assert tree(inst.run) == before  # no amber-report.json, nothing else either
    assert not inst.wh.paths.imports.exists() or not list(inst.wh.paths.imports.iterdir())
    assert imported_rows(inst, "a") == 0


@pytest.mark.docker
def test_a_folder_outside_with_a_link_into_another_workspace_is_refused(inst: Instance) -> None:
    mine = inst.tmp / "mixed"
    shutil.copytree(GOLDEN / "demo-bounds", mine)
    trial = next(inst.cell.glob("*/result.json")).parent
    (mine / trial.name).symlink_to(trial)
    missing = str(inst.tmp / "no-such-folder")
    assert same_sentence(refusal(amber(inst, "alice", "report", str(mine))), str(mine),
                         refusal(amber(inst, "alice", "report", missing)), missing)
    assert same_sentence(refusal(amber(inst, "alice", "import-harbor", str(mine))), str(mine),
                         refusal(amber(inst, "alice", "import-harbor", missing)), missing)
    assert imported_rows(inst, "a") == 0
    (mine / trial.name).unlink()  # the same folder without the link is alice's own business
    assert "pass rate" in ok(amber(inst, "alice", "report", str(mine)))


@pytest.mark.docker
def test_nothing_is_written_into_a_place_of_the_home_that_is_not_the_workspaces(inst: Instance) -> None:
    before = tree(inst.run)
    golden = str(GOLDEN / "demo-bounds")
    for target in (inst.run / "plot.png", inst.tmp / "link-to-b" / "plot.png", inst.wh.paths.catalog):
        said = refusal(amber(inst, "alice", "compare", golden, golden, "--plot", str(target)))
        assert said == f"{target} is inside Amber's home, where files go only into your own Jobs' run folders: " \
                       "give a path outside it."
        assert refusal(amber(inst, "alice", "report", golden, "--plot", str(target))) == said
    # A Harbor folder named after b's Job, imported, then gone: its report's default place would be b's folder.
    named = inst.tmp / "imports" / inst.job
    shutil.copytree(GOLDEN / "demo-bounds", named)
    assert "6 Trials" in ok(amber(inst, "alice", "import-harbor", str(named)))
    shutil.rmtree(named)
    said = refusal(amber(inst, "alice", "report", f"harbor:{inst.job}", "--json"))
    assert said.startswith(f"{inst.run / 'amber-report.json'} is inside Amber's home")
    assert tree(inst.run) == before
    # Its text report is alice's to read (the rows are her own import).
    assert "pass rate" in ok(amber(inst, "alice", "report", f"harbor:{inst.job}"))


@pytest.mark.docker
def test_the_owner_still_reads_imports_and_writes_into_its_own_run_folder(inst: Instance) -> None:
    cell = str(inst.cell)
    assert "pass rate" in ok(amber(inst, "bob", "report", cell))
    link = inst.tmp / "bobs-link"
    link.symlink_to(inst.cell)
    assert "pass rate" in ok(amber(inst, "bob", "report", str(link)))
    result = amber(inst, "bob", "report", cell, "--json")
    assert result.exit_code == 0 and (inst.cell / "amber-report.json").is_file(), result.stderr
    (inst.cell / "amber-report.json").unlink()
    result = amber(inst, "bob", "report", inst.job, "--json")
    assert result.exit_code == 0 and (inst.run / "amber-report.json").is_file(), result.stderr
    (inst.run / "amber-report.json").unlink()
    assert "1 Trials" in ok(amber(inst, "bob", "import-harbor", cell))
    assert "paired cases" in ok(amber(inst, "bob", "compare", cell, cell))
    assert imported_rows(inst, "b") == 1
    # b's whole run folder holds cells, not Trials: for bob that is a folder without Trials, not a missing one.
    assert refusal(amber(inst, "bob", "report", str(inst.run))).startswith(f"Harbor job folder {inst.run} has no")


def test_the_rule_for_paths_outside_and_inside_the_home(tmp_path: Path) -> None:
    wh = Warehouse(AmberPaths(tmp_path / "home"))
    wh.paths.ensure()
    outside = tmp_path / "anywhere" / "report.json"
    assert source_paths.permitted(wh, "a", outside) and source_paths.permitted(wh, "a", "/")
    for inside in (wh.paths.home, wh.paths.runs, wh.paths.runs / "job-nope", wh.paths.warehouse / "x.png",
                   wh.paths.benchmarks, tmp_path / "anywhere" / ".." / "home" / "cache"):
        assert not source_paths.permitted(wh, "a", inside), inside
    with pytest.raises(source_paths.NotYours):
        source_paths.writable(wh, "a", wh.paths.catalog)
    assert source_paths.writable(wh, "a", outside) == outside
