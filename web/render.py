"""The templates and the filters they format numbers with. Autoescaping is on for every template, so any text from
a Trial or a user (model output, a Task's name, a job label) is shown as text, never run as HTML or script."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

if TYPE_CHECKING:
    from web.viewer import Viewer

TEMPLATES = Path(__file__).parent / "templates"


@dataclass
class Page:
    """What a page handler gives back: its template and what the template shows."""

    template: str
    context: dict[str, Any] = field(default_factory=dict)
    status: int = 200
    title: str = ""


Handler = Callable[[Request, "Viewer", FormData | None], "Page | Response"]  # a page: what it shows, or a redirect


def reward(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def points(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}%"


def usd(value: Any) -> str:
    if value is None:
        return "—"
    amount = float(value)
    return f"${amount:,.2f}" if amount >= 1 or amount == 0 else f"${amount:,.4f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(round(value)), 60)
    return f"{minutes} min {secs:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def when(value: datetime | str | None) -> str:
    if value is None:
        return "—"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def as_json(value: Any) -> Markup:
    """A value as JSON inside a <script type="application/json"> element: '<' escaped so no text can end it."""
    text = json.dumps(value, default=str).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)  # noqa: S704 - every '<', '>' and '&' is escaped above


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(reward=reward, points=points, percent=percent, usd=usd, seconds=seconds, when=when,
                       as_json=as_json)
    return env


def render(page: Page, common: dict[str, Any]) -> str:
    return environment().get_template(page.template).render({**common, **page.context, "title": page.title})
