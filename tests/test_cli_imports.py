"""A command loads only what it uses: `amber --help` and the read commands start without the engines behind the
heavy commands (Dagster, Harbor, the Docker SDK, Arrow, pandas, matplotlib), which cost a fresh process most of
a second. Each case runs the real command in a fresh interpreter and reads `sys.modules` after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import helpers
import pytest

from amber_pipeline.warehouse.catalog import Warehouse

STATIC = Path(__file__).parent.parent / "examples" / "static-bench"
HEAVY = ("dagster", "harbor", "docker", "pandas", "pyarrow", "matplotlib", "numpy", "aiohttp", "litellm")

# Runs the CLI as `amber ARGS` does, then prints the top-level packages it loaded.
PROBE = """
import json, sys
from amber_pipeline.cli.app import main
sys.argv = ["amber", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
else:
    code = 0
print("\\nLOADED " + json.dumps({"code": code, "modules": sorted({m.split('.')[0] for m in sys.modules})}))
"""


def loaded(home: Path, *args: str) -> tuple[int, set[str], str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AMBER_URL", "AMBER_TOKEN")}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120,
                          env={**env, "AMBER_HOME": str(home)}, cwd=home.parent)
    line = next(x for x in done.stdout.splitlines() if x.startswith("LOADED "))
    found = json.loads(line.removeprefix("LOADED "))
    return found["code"], set(found["modules"]), done.stdout + done.stderr


@pytest.mark.parametrize("args", [("--help",), ("job", "status"), ("wallet",), ("job", "--help")])
def test_help_and_reads_load_no_engine(amber_home: Path, args: tuple[str, ...]) -> None:
    code, modules, output = loaded(amber_home, *args)
    assert code == 0, output
    assert not modules & set(HEAVY), f"amber {' '.join(args)} loaded {sorted(modules & set(HEAVY))}"


def test_a_read_of_a_job_prints_it_without_loading_an_engine(warehouse: Warehouse) -> None:
    """`amber job status JOB` on a Workspace with a Job: the catalog is read with parameters (which DuckDB 1.5
    binds by importing pandas), and the Job is shown."""
    job = helpers.submit(warehouse, str(STATIC), "direct", ["replay-strong"], 1)
    code, modules, output = loaded(warehouse.paths.home, "job", "status", job.id)
    assert code == 0 and job.id in output and "replay-strong" in output, output
    assert not modules & set(HEAVY), f"amber job status JOB loaded {sorted(modules & set(HEAVY))}"


def test_the_command_index_is_what_the_modules_say() -> None:
    """`amber --help` lists the root's commands from `cli/command_index.py` without importing them: a command added,
    renamed or re-described in its module fails here until `python -m amber_pipeline.cli.command_index` is run."""
    from amber_pipeline.cli import command_index as commands

    assert commands.index() == commands.COMMANDS


def test_the_root_help_lists_every_command_as_its_module_describes_it() -> None:
    """The index's listing is the help an eager root (every area's app added) prints, character for character."""
    import typer
    from typer.testing import CliRunner

    from amber_pipeline.cli import app
    from amber_pipeline.cli import command_index as commands

    eager = typer.Typer(no_args_is_help=True, add_completion=False, help=app.app.info.help)
    eager.callback()(app._root)
    for area in commands.AREAS:
        eager.add_typer(__import__(f"amber_pipeline.cli.{area}", fromlist=["app"]).app)
    runner = CliRunner()
    lazy, full = runner.invoke(app.app, ["--help"]), runner.invoke(eager, ["--help"])
    assert lazy.exit_code == full.exit_code == 0
    assert lazy.output == full.output and "import-harbor" in lazy.output


def test_every_operation_module_is_an_area() -> None:
    """`areas.find` imports areas in turn until one registers the operation: a module left out of AREAS would
    make its operations unknown to the CLI."""
    import pkgutil

    from amber_pipeline import operations
    from amber_pipeline.operations import areas

    modules = {m.name for m in pkgutil.iter_modules(operations.__path__)} - {"operation", "areas"}
    assert modules == set(areas.AREAS)
    assert all(areas.find(name).name == name for name in areas.OPERATIONS)


def test_the_code_location_loads_no_engine_of_a_run() -> None:
    """Every code server Dagster starts (the daemon's, the UI's, a deployment's) loads Amber's definitions to list
    its assets, jobs and sensors, and never runs one: what a run uses (Harbor, the Docker SDK, Arrow, matplotlib,
    litellm) is imported where it runs, and a code server starts on Dagster's imports and its own."""
    probe = ("import json, sys; import amber_pipeline.definitions as d; assert d.defs.resolve_all_job_defs(); "
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    modules = set(json.loads(done.stdout.splitlines()[-1]))
    assert "dagster" in modules
    assert not modules & (set(HEAVY) - {"dagster"}), f"the code location loaded {sorted(modules & set(HEAVY))}"
