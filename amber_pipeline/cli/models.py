"""`amber model ...`: the Model Configurations a Workspace can compare."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from amber_pipeline.cli import options
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out

if TYPE_CHECKING:
    from amber_pipeline.operations.models import Shown

app = typer.Typer()
model_app = typer.Typer(no_args_is_help=True, help="Model Configurations: a Model, its pinned Provider, its "
                                                   "settings and its prices.")
app.add_typer(model_app, name="model")


def _row(shown: Shown) -> list[object]:
    mc = shown.configuration
    p = mc.prices
    return [shown.ref, mc.model, mc.served_by if mc.served_by == mc.provider else f"{mc.provider} -> {mc.served_by}",
            f"{p.input:g} / {p.cached_input:g} / {p.output:g}"]


def _json(shown: Shown) -> dict:
    return {"ref": shown.ref, "id": shown.id, **shown.configuration.model_dump(mode="json")}


@model_app.command("list")
def model_list(ctx: typer.Context, as_json: options.Json = False) -> None:
    """The Model Configurations you can use: your Workspace's own, Amber's catalog, and the replays."""
    c = Context.of(ctx)
    known = c.call("model_list")
    if as_json:
        out.json([_json(shown) for shown in known.models])
        return
    out.table(["Model Configuration", "Model", "Provider", "USD per M tokens (in / cached / out)"],
              [_row(shown) for shown in known.models], title=f"Model Configurations of {known.workspace}")


@model_app.command("show")
def model_show(ctx: typer.Context,
               name: Annotated[str, typer.Argument(help="A Model Configuration's name or name@id.")],
               as_json: options.Json = False) -> None:
    """One Model Configuration in full, as the TOML `amber model add` reads."""
    shown = Context.of(ctx).call("model_show", name=name)
    if as_json:
        out.json(_json(shown))
        return
    out.line(f"# {shown.ref} (id {shown.id})")
    if shown.key_variable:
        out.line(f"# API key from {shown.key_variable}")
    out.lines(shown.configuration.to_toml().rstrip())


@model_app.command("add")
def model_add(ctx: typer.Context,
              path: Annotated[Path, typer.Argument(help="A TOML file with name, model, provider, [prices] "
                                                        "(input, cached_input, output, source) and [settings].")]
              ) -> None:
    """Add a Model Configuration of your own to your Workspace."""
    from amber_pipeline.models import configurations

    added = Context.of(ctx).call("model_add", toml=configurations.file_text(path), source=str(path))
    out.line(f"{'Added' if added.new else 'Already there:'} {added.shown.ref} to Workspace {added.workspace}.")
