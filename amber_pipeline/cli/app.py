"""`amber`: the command line of the embedded Amber.

Every command works on the instance in AMBER_HOME (default ./.amber). A
problem the user can fix prints one line and exits 1, without a traceback.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC
from decimal import Decimal
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from amber_pipeline.agents import catalog as agents
from amber_pipeline.analysis import compare as comparison
from amber_pipeline.analysis import judge, sources
from amber_pipeline.cli import compare as cli_compare
from amber_pipeline.cli import embedded
from amber_pipeline.cli import imports as cli_sources
from amber_pipeline.cli import money as cli_money
from amber_pipeline.cli import report as cli_report
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle as jobs
from amber_pipeline.jobs import quotes
from amber_pipeline.money import identity, wallet, workspaces
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.sandbox import docker_engine
from amber_pipeline.scoring import cells as report
from amber_pipeline.warehouse.catalog import Warehouse

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Amber: which AI model and agent to choose, with honest uncertainty.")
job_app = typer.Typer(no_args_is_help=True, help="Submit and follow Jobs.")
daemon_app = typer.Typer(no_args_is_help=True, help="The embedded Dagster daemon that starts cell runs.")
app.add_typer(job_app, name="job")
app.add_typer(daemon_app, name="daemon")
console = Console(width=None if sys.stdout.isatty() else 120)
DEMO_BENCHMARK = PROJECT_ROOT / "examples" / "demo-bench"
DEMO_CREDIT = Decimal(5)


_actor_options: dict[str, str | None] = {"user": None, "workspace": None}


@app.callback()
def _global(user: Annotated[str | None, typer.Option(help="Act as this user (default: config, else login).")] = None,
            workspace: Annotated[str | None, typer.Option(help="Act in this Workspace (default: config).")] = None,
            ) -> None:
    _actor_options.update(user=user, workspace=workspace)


def _paths() -> AmberPaths:
    return AmberPaths.from_env()


def _wh() -> Warehouse:
    return Warehouse(_paths())


def _actor() -> identity.Actor:
    return identity.resolve(_actor_options["user"], _actor_options["workspace"])


def _acting() -> tuple[Warehouse, identity.Actor, str]:
    """The warehouse, the acting user, and the Workspace they act in (checked)."""
    wh, actor = _wh(), _actor()
    workspace = workspaces.acting_workspace(wh, actor)
    quotes.expire_due(wh)
    return wh, actor, workspace


def _job_args(benchmark: str, agent: str, model: list[str] | None, trials: int, bounds: bool,
              public: bool) -> dict:
    return {"benchmark_ref": benchmark, "agent": agent, "models": model or [], "trials_per_task": trials,
            "bounds": bounds, "public": public}


BenchmarkArg = Annotated[str, typer.Argument(help="A Benchmark folder, or a Benchmark Version label name@N.")]
AgentOpt = Annotated[str, typer.Option(help=f"One of: {', '.join(agents.AGENTS)}.")]
ModelOpt = Annotated[list[str] | None, typer.Option(help="A Model Configuration; repeat for several.")]
TrialsOpt = Annotated[int, typer.Option(help="Trials per Task, 1 to 10.")]
BoundsOpt = Annotated[bool, typer.Option(help="Add oracle and nop cells as upper and lower bounds.")]
PublicOpt = Annotated[bool, typer.Option(help="Register the folder as a public Benchmark (staff only).")]


@job_app.command("quote")
def job_quote(benchmark: BenchmarkArg, agent: AgentOpt = agents.DEFAULT_AGENT, model: ModelOpt = None,
              trials: TrialsOpt = 1, bounds: BoundsOpt = False, public: PublicOpt = False) -> None:
    """Quote a Job and reserve its amount from the Wallet; start it with `amber job start QUOTE`."""
    wh, actor, workspace = _acting()
    quote = quotes.create(wh, workspace, actor.user, **_job_args(benchmark, agent, model, trials, bounds, public))
    _print_quote(quote)
    console.print(f"Start it within the hour with: amber job start {quote.id}")


@job_app.command("start")
def job_start(quote_id: str) -> None:
    """Start a quoted Job (by Quote or Job id)."""
    docker_engine.connect()
    wh, _, workspace = _acting()
    job = quotes.start(wh, workspace, quote_id)
    console.print(f"Started [bold]{job.id}[/] over {job.benchmark_label}.")
    _warn_without_daemon(wh)


@job_app.command("submit")
def job_submit(benchmark: BenchmarkArg, agent: AgentOpt = agents.DEFAULT_AGENT, model: ModelOpt = None,
               trials: TrialsOpt = 1, bounds: BoundsOpt = False, public: PublicOpt = False,
               wait: Annotated[bool, typer.Option(help="Wait for the Job with a progress bar.")] = False) -> None:
    """Quote a Job and start it at once; the embedded daemon starts its cell runs within seconds."""
    docker_engine.connect()
    wh, actor, workspace = _acting()
    quote, job = quotes.submit(wh, workspace, actor.user,
                               **_job_args(benchmark, agent, model, trials, bounds, public))
    _print_quote(quote)
    console.print(f"Started [bold]{job.id}[/].")
    _warn_without_daemon(wh)
    if wait:
        _wait(wh, workspace, job.id)


@job_app.command("cancel")
def job_cancel(job_id: str) -> None:
    """Stop a Job: no new Trial starts, in-flight ones stop, the unspent reservation is refunded."""
    wh, _, workspace = _acting()
    job = jobs.cancel(wh, workspace, job_id)
    console.print(f"{job.id} is {job.status}; in-flight Trials stop within seconds and the unspent "
                  "reservation is refunded once they have.")


def _print_quote(quote: quotes.Quote) -> None:
    table = Table(title=f"Quote {quote.id} for {quote.job_id} on {quote.benchmark_label}")
    for col in ("cell", "Tasks", "Trials/Task", "per Trial", "total", "estimate"):
        table.add_column(col, justify="left" if col in ("cell", "estimate") else "right")
    for c in quote.cells:
        table.add_row(c.label, str(c.n_tasks), str(c.trials_per_task), wallet.show(Decimal(c.cost_per_trial)),
                      wallet.show(Decimal(c.total)), c.basis)
    console.print(table)
    console.print(f"Reserved {wallet.show(quote.amount)} from Workspace {quote.workspace}'s Wallet as the Job's "
                  f"spending ceiling; the Quote expires at {quote.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC.")
    console.print(comparison.detectable_change_sentence(max((c.n_tasks for c in quote.cells), default=0)))


def _warn_without_daemon(wh: Warehouse) -> None:
    if embedded.daemon_pid(wh.paths) is None:
        console.print("No Amber daemon runs on this instance: start one with `amber daemon start` "
                      "(or `amber ui`) so the Job's cells run.")


@job_app.command("status")
def job_status(job_id: Annotated[str | None, typer.Argument()] = None) -> None:
    """The state of one Job and its cells, or of every Job of the Workspace."""
    wh, _, workspace = _acting()
    if job_id is None:
        table = Table(title=f"Jobs of Workspace {workspace}")
        for col in ("Job", "Benchmark", "status", "Trials done", "submitted"):
            table.add_column(col)
        for j in jobs.list_jobs(wh, workspace):
            total = sum(c.n_trials for c in jobs.cells_of(wh, j.id))
            table.add_row(j.id, j.benchmark_label, j.status, f"{jobs.trials_finished(wh, j.id)}/{total}",
                          f"{j.created_at:%Y-%m-%d %H:%M:%S}")
        console.print(table)
        return
    job = jobs.get_job(wh, job_id, workspace)
    console.print(f"{job.id} over {job.benchmark_label}: [bold]{job.status}[/]"
                  + (f" ({job.message})" if job.message else ""))
    table = Table()
    for col in ("cell", "status", "Trials", "note"):
        table.add_column(col)
    for c in jobs.cells_of(wh, job_id):
        table.add_row(c.label, c.status, str(c.n_trials), c.message or "")
    console.print(table)


@job_app.command("wait")
def job_wait(job_id: str) -> None:
    """Follow a Job with a progress bar until it ends, then print its results."""
    wh, _, workspace = _acting()
    _wait(wh, workspace, job_id)


def _wait(wh: Warehouse, workspace: str, job_id: str) -> None:
    total = sum(c.n_trials for c in jobs.cells_of(wh, jobs.get_job(wh, job_id, workspace).id))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        bar = progress.add_task(f"{job_id} Trials", total=total)
        while True:
            job = jobs.get_job(wh, job_id, workspace)
            progress.update(bar, completed=jobs.trials_finished(wh, job_id))
            if job.status in jobs.FINAL and not any(c.status == "running" for c in jobs.cells_of(wh, job_id)):
                break
            time.sleep(1)
    if job.status != "completed":
        console.print(f"{job_id} ended {job.status}" + (f": {job.message}" if job.message else "."))
    _print_results(wh, workspace, job_id)


@app.command("results")
def results(job_id: str, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Per-cell scores with 95% bootstrap CIs, and paired comparisons, for one Job."""
    wh, _, workspace = _acting()
    jobs.get_job(wh, job_id, workspace)
    if as_json:
        cells = report.cell_results(wh.trial_records(job_id=job_id))
        print(json.dumps({"job": job_id, **report.to_json(cells, report.comparisons(cells))}, indent=2))
    else:
        _print_results(wh, workspace, job_id)


def _print_results(wh: Warehouse, workspace: str, job_id: str) -> None:
    job = jobs.get_job(wh, job_id, workspace)
    cells = report.cell_results(wh.trial_records(job_id=job_id))
    if not cells:
        console.print(f"{job_id} has no results: no Trial of it ran.")
        return
    console.print(report.cells_table(cells, f"{job_id} on {job.benchmark_label}"))
    for line in report.comparison_lines(report.comparisons(cells)):
        console.print(line)


@app.command("sql")
def sql(query: str) -> None:
    """SQL over the acting Workspace's views (trials, rewards, cell_results, jobs, ledger, ...)."""
    import duckdb

    wh, _, workspace = _acting()
    with wh.query(workspace) as con:
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
    wh, actor, workspace = _acting()
    state, _ = wallet.read(wh, workspace)
    if state.available < DEMO_CREDIT:
        wallet.add_credit(wh, actor, workspace, str(DEMO_CREDIT - state.available), "demo credit")
    state, lines = wallet.read(wh, workspace)
    console.rule("Wallet before")
    cli_money.print_wallet(state, lines, last=5)
    started_here = embedded.daemon_pid(wh.paths) is None
    embedded.start_daemon(wh.paths)
    try:
        quote, job = quotes.submit(wh, workspace, actor.user, str(DEMO_BENCHMARK), agents.DEFAULT_AGENT,
                                   ["replay-strong", "replay-weak"], trials, bounds=True, public=True)
        _print_quote(quote)
        console.print(f"Started {job.id}: terminus-2 with replay-strong and replay-weak (scripted replies, "
                      "not real models), oracle and nop as bounds.")
        _wait(wh, workspace, job.id)
    finally:
        if started_here:
            embedded.stop_daemon(wh.paths)
    console.rule("Wallet after")
    state, lines = wallet.read(wh, workspace)
    cli_money.print_wallet(state, lines, last=6)
    console.print(f"\nQuery it: amber sql \"select task_name, model_configuration, reward from trials "
                  f"where job_id = '{job.id}'\"\nThe full report: amber report {job.id} --plot report.png")


@app.command("judge")
def judge_cmd(source: Annotated[str, typer.Argument(help="An Amber Job id, a Harbor job folder, or harbor:<name>.")],
              model: Annotated[str, typer.Option(help="The judge's Model Configuration.")],
              samples: Annotated[int, typer.Option(help="Judgements per failed Trial, 1 to 10.")] = 3,
              stage_labels: Annotated[Path | None, typer.Option(help="JSON: trial name -> stage.")] = None,
              as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Sort failed Trials into stages (understand, write, verify, other) with a model judge."""
    wh, _, workspace = _acting()
    labels = None
    if stage_labels is not None:
        try:
            labels = json.loads(stage_labels.read_text())
        except (OSError, ValueError) as e:
            raise AmberError(f"{stage_labels} is not a JSON object of trial name -> stage ({e}).") from None
    out = judge.judge(sources.load(wh, workspace, source), model, samples, labels)
    if as_json:
        print(json.dumps(out, indent=2))
        return
    console.print(f"Judge {out['model_configuration']}, {out['samples']} samples each, {out['judged']} failed Trials")
    for stage, count in out["stages"].items():
        console.print(f"  {stage}: {count}")
    alpha = out["samples_alpha"]
    console.print(f"Samples agree on {out['sample_agreement']:.0%} of Trials; alpha "
                  f"{'undefined' if alpha is None else f'{alpha:.3f}'}. {out['samples_guidance']}")
    if "labels" in out:
        lab = out["labels"]
        console.print(f"Against {lab['n_labels']} stage labels: agreement {lab['agreement']:.0%}, kappa "
                      f"{lab['cohen_kappa']}, alpha {lab['krippendorff_alpha']}.")


cli_money.register(app, _acting, _wh, _actor)
cli_sources.register(app, _acting)
cli_report.register(app, _acting, sources.load)
cli_compare.register(app, _acting, sources.load)


def main() -> None:
    try:
        app()
    except AmberError as e:
        Console(stderr=True).print(f"amber: {e}", highlight=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
