"""`amber ui`, `amber daemon ...` and `amber demo`: the embedded Amber itself."""

from __future__ import annotations

import ipaddress
from decimal import Decimal
from typing import Annotated

import typer

from amber_pipeline.agents.specs import AGENTS, DEFAULT_AGENT, agent_spec
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.errors import AmberError
from amber_pipeline.paths import PROJECT_ROOT

app = typer.Typer()
daemon_app = typer.Typer(no_args_is_help=True, help="The embedded Dagster daemon that starts cell runs.")
app.add_typer(daemon_app, name="daemon")
DEMO_BENCHMARK = PROJECT_ROOT / "examples" / "demo-bench"
STATIC_BENCHMARK = PROJECT_ROOT / "examples" / "static-bench"
DEMO_MODELS = ["replay-strong", "replay-weak"]
DEMO_CREDIT = Decimal(5)


@app.command("ui")
def ui(ctx: typer.Context,
       host: Annotated[str, typer.Option("--host", help="The address to serve on.")] = "127.0.0.1",
       port: Annotated[int, typer.Option("--port", help="The port to serve on.")] = 3000) -> None:
    """Serve Amber's web app and the Dagster UI, and run the daemon, on the embedded instance (Ctrl-C stops both)."""
    from amber_pipeline import embedded

    c = Context.of(ctx)
    c.host_only()
    if not _loopback(host):
        raise AmberError(f"`amber ui` serves your own pages without sign-in, so only on this machine (not on "
                         f"{host}): for others to reach Amber, run `amber serve --host {host}`, which asks each of "
                         "them to sign in.")
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    out.line(f"Amber: {url}/ and the Dagster UI: {url}/ui (Ctrl-C stops them)")
    raise typer.Exit(embedded.run_ui(c.paths, host, port))


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@app.command("view")
def view(ctx: typer.Context, job: Annotated[str, typer.Argument(help="The Job whose cells to show.")],
         host: Annotated[str, typer.Option("--host", help="The address to serve on.")] = "127.0.0.1",
         port: Annotated[int, typer.Option("--port", help="The port to serve on.")] = 8080) -> None:
    """Show a Job's Trials in Harbor's viewer, each cell as a Harbor job, read-only (Ctrl-C stops it)."""
    import uvicorn

    from amber_pipeline.jobs import harbor_view, records

    c = Context.of(ctx)
    c.host_only()
    acting = c.acting(reads=True)
    found = records.get_job(acting.wh, job, acting.workspace)
    out.line(f"Harbor's viewer of {found.id}: http://{f'[{host}]' if ':' in host else host}:{port}/ "
             "(read-only; Ctrl-C stops it)")
    uvicorn.run(harbor_view.read_only_viewer(c.paths.runs / found.id), host=host, port=port, log_level="warning")


@daemon_app.command("start")
def daemon_start(ctx: typer.Context) -> None:
    """Start the daemon in the background, unless it runs already."""
    from amber_pipeline import embedded

    c = Context.of(ctx)
    c.host_only()
    pid = embedded.start_daemon(c.paths)
    out.line(f"Amber daemon running (pid {pid}); log in {c.paths.dagster_home / 'daemon.log'}")


@daemon_app.command("stop")
def daemon_stop(ctx: typer.Context) -> None:
    """Stop the daemon this instance runs."""
    from amber_pipeline import embedded

    c = Context.of(ctx)
    c.host_only()
    stopped = embedded.stop_daemon(c.paths)
    out.line("Amber daemon stopped." if stopped else "No Amber daemon was running.")


@app.command("demo")
def demo(ctx: typer.Context,
         trials: Annotated[int, typer.Option("--trials", help="Trials per Task, 1 to 10.")] = 1,
         agent: Annotated[str, typer.Option("--agent", help=f"The Agent on the demo Tasks: {', '.join(AGENTS)}.")]
         = DEFAULT_AGENT) -> None:
    """Run the bundled demo: an Agent (terminus-2 unless --agent says otherwise) with two replay Model
    Configurations, oracle and nop as bounds; then the Direct Agent on the static example Benchmark. Every model
    call goes through the model proxy, which meters it."""
    from amber_pipeline import embedded
    from amber_pipeline.cli.jobs import follow, print_notice, print_quote
    from amber_pipeline.cli.money import print_wallet
    from amber_pipeline.jobs import lifecycle
    from amber_pipeline.jobs.request import JobRequest
    from amber_pipeline.money import wallet
    from amber_pipeline.operations.jobs import launch
    from amber_pipeline.sandbox import docker_engine

    spec = agent_spec(agent)
    c = Context.of(ctx)
    c.host_only()
    docker_engine.connect()
    acting = c.acting()
    wh = acting.wh
    state, _ = wallet.read(wh, acting.workspace)
    if state.available < DEMO_CREDIT:
        wallet.add_credit(wh, acting.actor, acting.workspace, str(DEMO_CREDIT - state.available), "demo credit")
    out.rule("Wallet before")
    print_wallet(*wallet.read(wh, acting.workspace), last=5)
    started_here = embedded.daemon_pid(wh.paths) is None
    embedded.start_daemon(wh.paths)
    try:
        job = None
        if not spec.static:  # the Direct Agent runs only the static part below
            request = JobRequest(benchmark=str(DEMO_BENCHMARK), agent=agent,
                                 model_configurations=DEMO_MODELS if spec.needs_model else [],
                                 trials_per_task=trials, bounds=True, public=True)
            made, job = lifecycle.submit(wh, acting.workspace, acting.actor.user, request)
            print_notice(launch(acting.wh, job.id))
            print_quote(made)
            models = " with replay-strong and replay-weak (scripted replies, not real models)" \
                if spec.needs_model else ""
            out.line(f"Started {job.id}: {agent}{models}, oracle and nop as bounds.")
            follow(c, job.id)
        static = JobRequest(benchmark=str(STATIC_BENCHMARK), agent="direct", model_configurations=DEMO_MODELS,
                            trials_per_task=trials, public=True)
        made, static_job = lifecycle.submit(wh, acting.workspace, acting.actor.user, static)
        print_notice(launch(acting.wh, static_job.id))
        print_quote(made)
        out.line(f"Started {static_job.id}: the Direct Agent on 12 static Tasks, one model call each, no sandbox.")
        follow(c, static_job.id)
    finally:
        if started_here:
            embedded.stop_daemon(wh.paths)
    out.rule("Wallet after")
    print_wallet(*wallet.read(wh, acting.workspace), last=6)
    shown = job or static_job
    out.line()
    out.line(f"Query it: amber sql \"select task_name, model_configuration, reward from trials where job_id = "
             f"'{shown.id}'\"")
    out.line(f"The full report: amber report {shown.id} --plot report.png")
