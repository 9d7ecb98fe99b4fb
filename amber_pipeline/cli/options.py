"""Options and arguments that several commands share, defined once with their help text."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from amber_pipeline.jobs.request import JobRequest

_FIELDS = JobRequest.model_fields


def _help(name: str) -> str:
    return _FIELDS[name].description or ""


Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
Source = Annotated[str, typer.Argument(help="An Amber Job id, a Harbor job folder, or harbor:<name> of an imported "
                                            "folder.")]
JobId = Annotated[str, typer.Argument(help="An Amber Job id (job-...).")]
Plot = Annotated[Path | None, typer.Option("--plot", help="Also draw a forest plot into this PNG file, and the "
                                           "cells' cost against their score (the frontier marked) into "
                                           "NAME-cost.png.")]

# The Job request's fields, with the request's own descriptions.
Benchmark = Annotated[str, typer.Argument(help=_help("benchmark"))]
Agent = Annotated[str, typer.Option("--agent", help=_help("agent"))]
Model = Annotated[list[str] | None, typer.Option("--model", help=_help("model_configurations") + " Repeat for "
                                                 "several.")]
Trials = Annotated[int, typer.Option("--trials", help=_help("trials_per_task"))]
Bounds = Annotated[bool, typer.Option("--bounds", help=_help("bounds"))]
Public = Annotated[bool, typer.Option("--public", help=_help("public"))]
Ceiling = Annotated[str | None, typer.Option("--ceiling", metavar="USD", help=_help("ceiling_usd"))]
StopWhenDecided = Annotated[bool, typer.Option("--stop-when-decided", help=_help("stop_when_decided"))]
Margin = Annotated[float | None, typer.Option("--margin-points", metavar="M", help=_help("margin_points"))]
OrderSeed = Annotated[int | None, typer.Option("--order-seed", help=_help("order_seed"))]


def job_request(benchmark: str, agent: str, model: list[str] | None, trials: int, bounds: bool,
                public: bool, ceiling: str | None = None, stop_when_decided: bool = False,
                margin_points: float | None = None, order_seed: int | None = None) -> JobRequest:
    from amber_pipeline.money.amounts import parse_amount

    return JobRequest(benchmark=benchmark, agent=agent, model_configurations=model or [], trials_per_task=trials,
                      bounds=bounds, public=public,
                      ceiling_usd=None if ceiling is None else float(parse_amount(ceiling, "--ceiling")),
                      stop_when_decided=stop_when_decided, margin_points=margin_points, order_seed=order_seed)
