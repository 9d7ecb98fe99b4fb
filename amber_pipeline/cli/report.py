"""`amber report`, `amber import-harbor` and `amber judge`: one round, from an Amber Job or a Harbor job folder."""

from __future__ import annotations

import errno
import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from amber_pipeline.cli import options
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.errors import AmberError
from amber_pipeline.operations.reports import REPORT_FILE

if TYPE_CHECKING:
    from amber_pipeline.analysis.report import RoundReport

app = typer.Typer()


def read_tasks(path: Path) -> tuple[list[str], dict[str, float]]:
    """All Task names of a Benchmark folder, and their agent time limits ([agent].timeout_sec)."""
    from amber_pipeline.benchmarks.tasks import find_task_dirs, load_task

    dirs = find_task_dirs(path)
    base = path if dirs != [path] else path.parent
    specs = [load_task(d, base) for d in dirs]
    return [s.name for s in specs], {s.name: s.agent_timeout_sec for s in specs if s.agent_timeout_sec is not None}


def read_labels(path: Path, c: Context) -> dict[str, str]:
    """labels.json: one JSON object, trial name -> cause; on this machine's instance, one the Workspace may not
    read reads as missing (a server's client reads its own files)."""
    from amber_pipeline.analysis import source_paths

    missing = AmberError(f"No labels file at {path}: give the path of labels.json.")
    if c.remote is None:
        acting = c.acting(reads=True)
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


def _plotter() -> Callable[[RoundReport, Path], list[Path]]:

    try:
        plots = importlib.import_module("amber_pipeline.analysis.plots")
    except ModuleNotFoundError as e:
        if e.name != "amber_pipeline.analysis.plots":
            raise
        raise AmberError("Plotting is unavailable in this installation: run the report without --plot.") from None
    report_plots: Callable[[RoundReport, Path], list[Path]] = plots.report_plots
    return report_plots


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
    from amber_pipeline.analysis import source_paths
    from amber_pipeline.analysis.render_report import render_text
    from amber_pipeline.benchmarks.tasks import no_benchmark

    draw_plots = _plotter() if plot is not None else None
    c = Context.of(ctx)
    if tasks is not None and c.remote is None and c.paths.holds(tasks):  # paths are not permissions
        raise no_benchmark(tasks)
    all_tasks, limits = read_tasks(tasks) if tasks is not None else (None, None)
    given_labels = read_labels(labels, c) if labels is not None else None
    if plot is not None and c.remote is None:  # both files `plots.report_plots` writes: the plot and NAME-cost.png
        acting = c.acting(reads=True)
        for target in (plot, plot.with_stem(plot.stem + "-cost")):
            source_paths.writable(acting.wh, acting.workspace, target)
    made = c.call("report", source=source, all_tasks=all_tasks, task_time_limits=limits, labels=given_labels,
                  write_json=as_json)
    if as_json:
        out.json(made.report.model_dump(mode="json"))
        out.error(f"Wrote {made.path}" + (f" on {c.remote.url}" if c.remote is not None else ""))
    else:
        out.lines(render_text(made.report))
    if draw_plots is not None and plot is not None:
        for written in draw_plots(made.report, plot):
            out.error(f"Wrote {written}")


@app.command("import-harbor")
def import_harbor(ctx: typer.Context, folder: Annotated[Path, typer.Argument(
        help="A job folder `harbor run` wrote (jobs/<job name>).")]) -> None:
    """Import a Harbor job folder's finished trials for reports and `amber sql` (view imported_trials)."""
    from amber_pipeline.analysis import sources

    acting = Context.of(ctx).acting(reads=True)
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
    from amber_pipeline.analysis import source_paths
    from amber_pipeline.analysis.judge import JudgeReport

    c = Context.of(ctx)
    labels = None
    if stage_labels is not None:
        try:
            workspace = None if c.remote is not None else c.acting(reads=True).workspace
            if workspace is not None and not source_paths.permitted(c.warehouse, workspace, stage_labels):
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(stage_labels))
            labels = json.loads(stage_labels.read_text())
        except (OSError, ValueError) as e:
            raise AmberError(f"{stage_labels} is not a JSON object of trial name -> stage ({e}).") from None
    found: JudgeReport = c.call("judge", source=source, model=model, samples=samples, stage_labels=labels)
    if as_json:
        out.json(found.model_dump(mode="json"))
        return
    out.line(f"Judge {found.model_configuration}, {found.samples} samples each, {found.judged} failed Trials")
    for stage, count in found.stages.items():
        out.line(f"  {stage}: {count}")
    alpha = found.samples_alpha
    out.line(f"Samples agree on {found.sample_agreement:.0%} of Trials; alpha "
             f"{'undefined' if alpha is None else f'{alpha:.3f}'}. {found.samples_guidance}")
    if (lab := found.labels) is not None:
        out.line(f"Against {lab.n_labels} stage labels: agreement {lab.agreement:.0%}, kappa "
                 f"{lab.cohen_kappa}, alpha {lab.krippendorff_alpha}.")
