"""`amber agent ...`: the Agents Amber ships, and their images."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from amber_pipeline.cli import options
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out

if TYPE_CHECKING:
    from amber_pipeline.agents.specs import AgentSpec

app = typer.Typer()
agent_app = typer.Typer(no_args_is_help=True, help="Agents: the software that drives a Model through a Task.")
app.add_typer(agent_app, name="agent")


def _where(spec: AgentSpec) -> str:
    if spec.static:
        return "static Tasks, no sandbox"
    if spec.software is not None:
        return "in the sandbox"
    return "on the host" if spec.needs_model else "in the sandbox (no model)"


def _version(spec: AgentSpec) -> str:
    return f"{spec.software.package} {spec.software.version}" if spec.software else spec.version


@agent_app.command("list")
def agent_list(as_json: options.Json = False) -> None:
    """The Agents, their software versions, their Provider rules, and the key their cells carry."""
    from amber_pipeline.agents.specs import AGENTS

    if as_json:
        out.json([{"name": a.name, "version": _version(a), "providers": sorted(a.providers or []),
                   "runs": _where(a), "spec_id": a.spec_id, "description": a.description} for a in AGENTS.values()])
        return
    out.table(["Agent", "software", "Providers", "runs", "cell key"],
              [[a.name, _version(a), ", ".join(sorted(a.providers)) if a.providers else "any", _where(a),
                f"{a.name}@{a.spec_id}"] for a in AGENTS.values()], title="Agents (--json for descriptions)")


@agent_app.command("build")
def agent_build(ctx: typer.Context,
                names: Annotated[list[str] | None, typer.Argument(help="Agents to build (default: every installed "
                                                                       "Agent).")] = None) -> None:
    """Build installed Agents' software images now, so their first Trials do not wait for them (a minute each on
    a bare machine; a lookup once built)."""
    from amber_pipeline.agents.specs import AGENTS, agent_spec
    from amber_pipeline.sandbox import agent_image, docker_engine

    Context.of(ctx).host_only()  # the images go to the engines of the instance's host
    specs = [agent_spec(n) for n in names] if names else [a for a in AGENTS.values() if a.software is not None]
    client = docker_engine.connect()
    for spec in specs:
        if spec.software is None:
            out.line(f"{spec.name} needs no image of its own.")
            continue
        started = time.perf_counter()
        tag = agent_image.software_image(client, spec.name, spec.software)
        out.line(f"{spec.name}: {tag} ({time.perf_counter() - started:.1f} s)")
