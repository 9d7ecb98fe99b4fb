"""`amber`: the command line of the embedded Amber.

Every command works on the instance in AMBER_HOME (default ./.amber). A
problem the user can fix prints one line and exits 1, without a traceback.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from amber_pipeline import agents, docker_engine, embedded, jobs, report
from amber_pipeline.errors import AmberError
from amber_pipeline.settings import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse import Warehouse

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Amber: which AI model and agent to choose, with honest uncertainty.")
job_app = typer.Typer(no_args_is_help=True, help="Submit and follow Jobs.")
daemon_app = typer.Typer(no_args_is_help=True, help="The embedded Dagster daemon that starts cell runs.")
app.add_typer(job_app, name="job")
app.add_typer(daemon_app, name="daemon")
console = Console(width=None if sys.stdout.isatty() else 120)
FINAL = ("completed", "failed", "cancelled", "ceiling_reached")
DEMO_BENCHMARK = PROJECT_ROOT / "examples" / "demo-bench"


def _paths() -> AmberPaths:
    return AmberPaths.from_env()


def _wh() -> Warehouse:
    return Warehouse(_paths())


@job_app.command("submit")
def job_submit(
    benchmark: Annotated[str, typer.Argument(help="A Benchmark folder, or a Benchmark Version label name@N.")],
    agent: Annotated[str, typer.Option(help=f"One of: {', '.join(agents.AGENTS)}.")] = agents.DEFAULT_AGENT,
    model: Annotated[list[str] | None, typer.Option(help="A Model Configuration; repeat for several.")] = None,
    trials: Annotated[int, typer.Option(help="Trials per Task, 1 to 10.")] = 1,
    bounds: Annotated[bool, typer.Option(help="Add oracle and nop cells as upper and lower bounds.")] = False,
    wait: Annotated[bool, typer.Option(help="Wait for the Job with a progress bar.")] = False,
) -> None:
    """Submit a Job; the embedded daemon starts its cell runs within seconds."""
    docker_engine.connect()
    wh = _wh()
    job = jobs.submit(wh, benchmark, agent, model or [], trials, bounds=bounds)
    cells = jobs.cells_of(wh, job.id)
    console.print(f"Submitted [bold]{job.id}[/]: {job.benchmark_label}, {len(cells)} cells, "
                  f"{len(cells) * cells[0].n_trials} Trials.")
    if embedded.daemon_pid(wh.paths) is None:
        console.print("No Amber daemon runs on this instance: start one with `amber daemon start` "
                      "(or `amber ui`) so the Job's cells run.")
    if wait:
        _wait(wh, job.id)


@job_app.command("status")
def job_status(job_id: Annotated[str | None, typer.Argument()] = None) -> None:
    """The state of one Job and its cells, or of every Job."""
    wh = _wh()
    if job_id is None:
        table = Table(title="Jobs")
        for col in ("Job", "Benchmark", "status", "Trials done", "submitted"):
            table.add_column(col)
        for j in jobs.list_jobs(wh):
            total = sum(c.n_trials for c in jobs.cells_of(wh, j.id))
            table.add_row(j.id, j.benchmark_label, j.status, f"{jobs.trials_finished(wh, j.id)}/{total}",
                          f"{j.created_at:%Y-%m-%d %H:%M:%S}")
        console.print(table)
        return
    job = jobs.get_job(wh, job_id)
    cells = jobs.cells_of(wh, job_id)
    console.print(f"{job.id} over {job.benchmark_label}: [bold]{job.status}[/]"
                  + (f" ({job.message})" if job.message else ""))
    table = Table()
    for col in ("cell", "status", "Trials", "note"):
        table.add_column(col)
    for c in cells:
        label = c.agent if c.model_configuration == "none" else f"{c.agent} / {c.model_configuration}"
        table.add_row(label, c.status, str(c.n_trials), c.message or "")
    console.print(table)


@job_app.command("wait")
def job_wait(job_id: str) -> None:
    """Follow a Job with a progress bar until it ends, then print its results."""
    _wait(_wh(), job_id)


def _wait(wh: Warehouse, job_id: str) -> None:
    total = sum(c.n_trials for c in jobs.cells_of(wh, job_id))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        bar = progress.add_task(f"{job_id} Trials", total=total)
        while True:
            job = jobs.get_job(wh, job_id)
            progress.update(bar, completed=jobs.trials_finished(wh, job_id))
            if job.status in FINAL:
                break
            time.sleep(1)
    if job.status != "completed":
        console.print(f"{job_id} ended {job.status}" + (f": {job.message}" if job.message else "."))
    _print_results(wh, job_id)


@app.command("results")
def results(job_id: str, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Per-cell scores with 95% bootstrap CIs, and paired comparisons, for one Job."""
    wh = _wh()
    jobs.get_job(wh, job_id)
    if as_json:
        cells = report.cell_results(wh.trial_records(job_id=job_id))
        print(json.dumps({"job": job_id, **report.to_json(cells, report.comparisons(cells))}, indent=2))
    else:
        _print_results(wh, job_id)


def _print_results(wh: Warehouse, job_id: str) -> None:
    job = jobs.get_job(wh, job_id)
    cells = report.cell_results(wh.trial_records(job_id=job_id))
    if not cells:
        raise AmberError(f"{job_id} has no stored Trials yet: follow it with `amber job wait {job_id}`.")
    console.print(report.cells_table(cells, f"{job_id} on {job.benchmark_label}"))
    for line in report.comparison_lines(report.comparisons(cells)):
        console.print(line)


@app.command("sql")
def sql(query: str) -> None:
    """Run SQL over the warehouse views (trials, rewards, cell_results, jobs, job_cells, benchmark_versions)."""
    import duckdb

    with _wh().query() as con:
        try:
            cursor = con.execute(query)
        except duckdb.Error as e:
            raise AmberError(f"The query failed: {str(e).splitlines()[0]}") from None
        columns = [d[0] for d in cursor.description or []]
        rows = cursor.fetchall()
    table = Table()
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*["" if v is None else str(v) for v in row])
    console.print(table)


@app.command("ui")
def ui(host: str = "127.0.0.1", port: int = 3000) -> None:
    """Start the Dagster webserver and daemon on the embedded instance."""
    console.print(f"Amber UI: http://{host}:{port} (Ctrl-C stops it)")
    raise typer.Exit(embedded.run_ui(_paths(), host, port))


@daemon_app.command("start")
def daemon_start() -> None:
    pid = embedded.start_daemon(_paths())
    console.print(f"Amber daemon running (pid {pid}); log in {_paths().dagster_home / 'daemon.log'}")


@daemon_app.command("stop")
def daemon_stop() -> None:
    console.print("Amber daemon stopped." if embedded.stop_daemon(_paths()) else "No Amber daemon was running.")


@app.command("demo")
def demo(trials: int = 1) -> None:
    """Run the bundled demo: two replay Model Configurations with oracle and nop as bounds."""
    docker_engine.connect()
    paths = _paths()
    started_here = embedded.daemon_pid(paths) is None
    embedded.start_daemon(paths)
    try:
        wh = Warehouse(paths)
        job = jobs.submit(wh, str(DEMO_BENCHMARK), agents.DEFAULT_AGENT, ["replay-strong", "replay-weak"],
                          trials, bounds=True)
        console.print(f"Submitted {job.id} over {job.benchmark_label}: terminus-2 with replay-strong and "
                      "replay-weak (scripted replies, not real models), oracle and nop as bounds.")
        _wait(wh, job.id)
    finally:
        if started_here:
            embedded.stop_daemon(paths)
    console.print(f"\nQuery it: amber sql \"select task_name, model_configuration, reward from trials "
                  f"where job_id = '{job.id}'\"")


def main() -> None:
    try:
        app()
    except AmberError as e:
        Console(stderr=True).print(f"amber: {e}", highlight=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
