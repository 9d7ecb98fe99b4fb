"""`amber report`, `amber import-harbor` and `amber judge`: one round, from an Amber Job or a Harbor job folder."""

from __future__ import annotations

import errno
import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from amber_pipeline.analysis import judge, source_paths, sources
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.report import build_report, render_text
from amber_pipeline.analysis.trial_folders import HARBOR_PREFIX
from amber_pipeline.benchmarks.tasks import find_task_dirs, load_task, no_benchmark
from amber_pipeline.cli import options
from amber_pipeline.cli.context import Acting, Context
from amber_pipeline.cli.jobs import job_record
from amber_pipeline.cli.output import out
from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.files import write_text

REPORT_FILE = "amber-report.json"
app = typer.Typer()


def read_tasks(path: Path) -> tuple[list[str], dict[str, float]]:
    """All Task names of a Benchmark folder, and their agent time limits ([agent].timeout_sec)."""
    dirs = find_task_dirs(path)
    base = path if dirs != [path] else path.parent
    specs = [load_task(d, base) for d in dirs]
    return [s.name for s in specs], {s.name: s.agent_timeout_sec for s in specs if s.agent_timeout_sec is not None}


def read_labels(path: Path, acting: Acting) -> dict[str, str]:
    """labels.json: one JSON object, trial name -> cause; one the Workspace may not read reads as missing."""
    missing = AmberError(f"No labels file at {path}: give the path of labels.json.")
    if not source_paths.permitted(acting.wh, acting.workspace, path):
        raise missing
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise missing from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AmberError(f"{path} is not readable JSON ({e}): fix the labels file.") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise AmberError(f"{path} must be one JSON object of trial name to cause: fix the labels file.")
    return data


def report_path(wh: Warehouse, workspace: str, source: str, evidence: list[TrialEvidence]) -> Path:
    """Where the JSON report goes, next to the source.

    A Harbor job folder: inside it. ``harbor:<name>``: the folder that holds its Trial folders when
    they share one, else ``$AMBER_HOME/runs/<name>``. An Amber Job: ``$AMBER_HOME/runs/<job>``. A folder
    or harbor:<name> place inside Amber's home must be the Workspace's own (`source_paths.writable`); an
    Amber Job's is, since its evidence loaded.
    """
    folder = Path(source)
    if not source.startswith(HARBOR_PREFIX) and folder.is_dir():
        return source_paths.writable(wh, workspace, folder / REPORT_FILE)
    name = source.removeprefix(HARBOR_PREFIX)
    if source.startswith(HARBOR_PREFIX):
        parents = {Path(e.trial_dir).parent for e in evidence if e.trial_dir}
        if len(parents) == 1 and (parent := parents.pop()).is_dir():
            return source_paths.writable(wh, workspace, parent / REPORT_FILE)
    if not name or Path(name).name != name or name in (".", ".."):
        raise AmberError(f"{source!r} is neither a folder nor an Amber Job id: give one of them.")
    path = wh.paths.runs / name / REPORT_FILE
    return source_paths.writable(wh, workspace, path) if source.startswith(HARBOR_PREFIX) else path


def _plotter() -> Callable[[dict[str, Any], Path], list[Path]]:
    try:
        plots = importlib.import_module("amber_pipeline.analysis.plots")
    except ModuleNotFoundError as e:
        if e.name != "amber_pipeline.analysis.plots":
            raise
        raise AmberError("Plotting is unavailable in this installation: run the report without --plot.") from None
    report_plots: Callable[[dict[str, Any], Path], list[Path]] = plots.report_plots
    return report_plots


def _job_record(acting: Acting, source: str) -> dict[str, Any]:
    """What an Amber Job's record adds to its report (the Tasks it left missing, where the Agent's own token
    count disagrees with the proxy's); nothing for a folder or a Job whose Trials are here but whose record
    is not."""
    if not source.startswith("job-") or Path(source).exists():
        return {}
    try:
        return job_record(acting, source)
    except AmberError:
        return {}


@app.command("report")
def report_cmd(
    ctx: typer.Context,
    source: options.Source,
    as_json: Annotated[bool, typer.Option("--json", help=f"Print JSON and write {REPORT_FILE} next to the "
                                                         "source.")] = False,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="The Benchmark folder: all Task names and time "
                                               "limits.")] = None,
    labels: Annotated[Path | None, typer.Option("--labels", help="labels.json: trial name -> cause, to check "
                                                "the causes.")] = None,
    plot: options.Plot = None,
) -> None:
    """Pass rates with 95% intervals, why attempts failed, near misses and the cells of one round."""
    draw_plots = _plotter() if plot is not None else None
    acting = Context.of(ctx).acting()
    if tasks is not None and acting.wh.paths.holds(tasks):  # paths are not permissions
        raise no_benchmark(tasks)
    all_tasks, limits = read_tasks(tasks) if tasks is not None else (None, None)
    given_labels = read_labels(labels, acting) if labels is not None else None
    if plot is not None:  # both files `plots.report_plots` writes: the plot and NAME-cost.png beside it
        for target in (plot, plot.with_stem(plot.stem + "-cost")):
            source_paths.writable(acting.wh, acting.workspace, target)
    evidence = sources.load(acting.wh, acting.workspace, source)
    job = _job_record(acting, source)
    result = build_report(evidence, all_tasks=all_tasks, task_time_limits=limits, labels=given_labels,
                          missing_tasks=job.get("missing_tasks"))
    if job:
        result["metering_disagreements"] = job["metering_disagreements"]
    if as_json:
        text = json.dumps(result, indent=2, allow_nan=False)
        path = report_path(acting.wh, acting.workspace, source, evidence)
        write_text(path, text + "\n")
        typer.echo(text)
        typer.echo(f"Wrote {path}", err=True)
    else:
        typer.echo(render_text(result), nl=False)
    if draw_plots is not None and plot is not None:
        for written in draw_plots(result, plot):
            typer.echo(f"Wrote {written}", err=True)


@app.command("import-harbor")
def import_harbor(ctx: typer.Context, folder: Annotated[Path, typer.Argument(
        help="A job folder `harbor run` wrote (jobs/<job name>).")]) -> None:
    """Import a Harbor job folder's finished trials for reports and `amber sql` (view imported_trials)."""
    acting = Context.of(ctx).acting()
    name, rows = sources.import_harbor(acting.wh, acting.workspace, folder)
    out.line(f"Imported {name}: {rows} Trials into Workspace {acting.workspace}. Query them with "
             f"amber sql \"select * from imported_trials where source = '{name}'\"")


@app.command("judge")
def judge_cmd(ctx: typer.Context, source: options.Source,
              model: Annotated[str, typer.Option("--model", help="The judge's Model Configuration.")],
              samples: Annotated[int, typer.Option("--samples", help="Judgements per failed Trial, 1 to 10.")] = 3,
              stage_labels: Annotated[Path | None, typer.Option("--stage-labels", help="JSON: trial name -> "
                                                                "stage.")] = None,
              as_json: options.Json = False) -> None:
    """Sort failed Trials into stages (understand, write, verify, other) with a model judge."""
    acting = Context.of(ctx).acting()
    labels = None
    if stage_labels is not None:
        try:
            if not source_paths.permitted(acting.wh, acting.workspace, stage_labels):
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(stage_labels))
            labels = json.loads(stage_labels.read_text())
        except (OSError, ValueError) as e:
            raise AmberError(f"{stage_labels} is not a JSON object of trial name -> stage ({e}).") from None
    found = judge.judge(sources.load(acting.wh, acting.workspace, source), model, samples, labels)
    if as_json:
        out.json(found)
        return
    out.line(f"Judge {found['model_configuration']}, {found['samples']} samples each, {found['judged']} failed "
             "Trials")
    for stage, count in found["stages"].items():
        out.line(f"  {stage}: {count}")
    alpha = found["samples_alpha"]
    out.line(f"Samples agree on {found['sample_agreement']:.0%} of Trials; alpha "
             f"{'undefined' if alpha is None else f'{alpha:.3f}'}. {found['samples_guidance']}")
    if "labels" in found:
        lab = found["labels"]
        out.line(f"Against {lab['n_labels']} stage labels: agreement {lab['agreement']:.0%}, kappa "
                 f"{lab['cohen_kappa']}, alpha {lab['krippendorff_alpha']}.")
