"""`amber report SOURCE`: the main report of a round, from an Amber Job or a Harbor job folder.

`register` adds the command to an app; the caller supplies how to act (warehouse, actor, Workspace)
and how to load a source, so the command is tested without a real instance or Harbor folder.
"""

from __future__ import annotations

import importlib
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.report import build_report, render_text
from amber_pipeline.benchmarks import tasks as benchmark
from amber_pipeline.errors import AmberError
from amber_pipeline.money.identity import Actor
from amber_pipeline.warehouse.catalog import Warehouse

REPORT_FILE = "amber-report.json"
HARBOR_PREFIX = "harbor:"


def read_tasks(path: Path) -> tuple[list[str], dict[str, float]]:
    """All Task names of a Benchmark folder, and their agent time limits ([agent].timeout_sec)."""
    dirs = benchmark.find_task_dirs(path)
    base = path if dirs != [path] else path.parent
    specs = [benchmark.load_task(d, base) for d in dirs]
    return [s.name for s in specs], {s.name: s.agent_timeout_sec for s in specs if s.agent_timeout_sec is not None}


def read_labels(path: Path) -> dict[str, str]:
    """labels.json: one JSON object, trial name -> cause."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise AmberError(f"No labels file at {path}: give the path of labels.json.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AmberError(f"{path} is not readable JSON ({e}): fix the labels file.") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise AmberError(f"{path} must be one JSON object of trial name to cause: fix the labels file.")
    return data


def report_path(wh: Warehouse, source: str, evidence: list[TrialEvidence]) -> Path:
    """Where the JSON report goes, next to the source.

    A Harbor job folder: inside it. ``harbor:<name>``: the folder that holds its Trial folders when
    they share one, else ``$AMBER_HOME/runs/<name>``. An Amber Job: ``$AMBER_HOME/runs/<job>``.
    """
    folder = Path(source)
    if not source.startswith(HARBOR_PREFIX) and folder.is_dir():
        return folder / REPORT_FILE
    name = source.removeprefix(HARBOR_PREFIX)
    if source.startswith(HARBOR_PREFIX):
        parents = {Path(e.trial_dir).parent for e in evidence if e.trial_dir}
        if len(parents) == 1 and (parent := parents.pop()).is_dir():
            return parent / REPORT_FILE
    if not name or Path(name).name != name or name in (".", ".."):
        raise AmberError(f"{source!r} is neither a folder nor an Amber Job id: give one of them.")
    return wh.paths.runs / name / REPORT_FILE


def write_json(path: Path, text: str) -> None:
    """Write atomically (temporary name, then rename), so a reader sees a whole report or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _plotter() -> Callable[[dict[str, Any], Path], None]:
    try:
        plots = importlib.import_module("amber_pipeline.analysis.plots")
    except ModuleNotFoundError as e:
        if e.name != "amber_pipeline.analysis.plots":
            raise
        raise AmberError("Plotting is unavailable in this installation: run the report without --plot.") from None
    forest_plot: Callable[[dict[str, Any], Path], None] = plots.forest_plot
    return forest_plot


def register(app: typer.Typer, acting: Callable[[], tuple[Warehouse, Actor, str]],
             load_source: Callable[[Warehouse, str, str], list[TrialEvidence]]) -> None:
    """Add `report` to ``app``; ``acting`` gives the warehouse, actor and Workspace, ``load_source`` the evidence."""

    @app.command("report")
    def report(
        source: Annotated[str, typer.Argument(help="An Amber Job id, a Harbor job folder, or harbor:<name>.")],
        as_json: Annotated[bool, typer.Option("--json", help=f"Print JSON and write {REPORT_FILE} next to the "
                                                             "source.")] = False,
        tasks: Annotated[Path | None, typer.Option(help="The Benchmark folder: all Task names and time limits.")]
        = None,
        labels: Annotated[Path | None, typer.Option(help="labels.json: trial name -> cause, to check the causes.")]
        = None,
        plot: Annotated[Path | None, typer.Option(help="Also draw a forest plot into this PNG file.")] = None,
    ) -> None:
        """Pass rates with 95% intervals, why attempts failed, near misses and the cells of one round."""
        forest_plot = _plotter() if plot is not None else None
        all_tasks, limits = read_tasks(tasks) if tasks is not None else (None, None)
        given_labels = read_labels(labels) if labels is not None else None
        wh, _, workspace = acting()
        evidence = load_source(wh, workspace, source)
        if not evidence:
            raise AmberError(f"{source} has no Trials: give an Amber Job or a Harbor job folder with finished "
                             "Trials.")
        result = build_report(evidence, all_tasks=all_tasks, task_time_limits=limits, labels=given_labels)
        if as_json:
            text = json.dumps(result, indent=2, allow_nan=False)
            path = report_path(wh, source, evidence)
            write_json(path, text + "\n")
            typer.echo(text)
            typer.echo(f"Wrote {path}", err=True)
        else:
            typer.echo(render_text(result), nl=False)
        if forest_plot is not None and plot is not None:
            forest_plot(result, plot)
