"""`amber model ...`: the Model Configurations a Workspace can compare."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from amber_pipeline.cli import options
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.models import configurations
from amber_pipeline.models.configurations import ModelConfiguration

app = typer.Typer()
model_app = typer.Typer(no_args_is_help=True, help="Model Configurations: a Model, its pinned Provider, its "
                                                   "settings and its prices.")
app.add_typer(model_app, name="model")


def _row(mc: ModelConfiguration) -> list[object]:
    p = mc.prices
    return [mc.ref, mc.model, mc.served_by if mc.served_by == mc.provider else f"{mc.provider} -> {mc.served_by}",
            f"{p.input:g} / {p.cached_input:g} / {p.output:g}"]


@model_app.command("list")
def model_list(ctx: typer.Context, as_json: options.Json = False) -> None:
    """The Model Configurations you can use: your Workspace's own, Amber's catalog, and the replays."""
    acting = Context.of(ctx).acting()
    known = configurations.known_model_configurations(acting.wh.paths, acting.workspace)
    if as_json:
        out.json([{"ref": mc.ref, "id": mc.id, **mc.model_dump(mode="json")} for mc in known.values()])
        return
    out.table(["Model Configuration", "Model", "Provider", "USD per M tokens (in / cached / out)"],
              [_row(mc) for mc in known.values()], title=f"Model Configurations of {acting.workspace}")


@model_app.command("show")
def model_show(ctx: typer.Context,
               name: Annotated[str, typer.Argument(help="A Model Configuration's name or name@id.")],
               as_json: options.Json = False) -> None:
    """One Model Configuration in full, as the TOML `amber model add` reads."""
    acting = Context.of(ctx).acting()
    mc = configurations.model_configuration(name, acting.wh.paths, acting.workspace)
    if as_json:
        out.json({"ref": mc.ref, "id": mc.id, **mc.model_dump(mode="json")})
        return
    out.line(f"# {mc.ref} (id {mc.id})")
    if mc.key_variable:
        out.line(f"# API key from {mc.key_variable}")
    out.line(mc.to_toml().rstrip())


@model_app.command("add")
def model_add(ctx: typer.Context,
              path: Annotated[Path, typer.Argument(help="A TOML file with name, model, provider, [prices] "
                                                        "(input, cached_input, output, source) and [settings].")]
              ) -> None:
    """Add a Model Configuration of your own to your Workspace."""
    acting = Context.of(ctx).acting()
    mc, new = configurations.add(acting.wh.paths, acting.workspace, configurations.read_file(path))
    out.line(f"{'Added' if new else 'Already there:'} {mc.ref} to Workspace {acting.workspace}.")
