"""The registry of operations, and how one runs for an acting user.

An operation is a function `(acting, params) -> record` registered with its
HTTP method and path. Its params are one pydantic model (query parameters for
a GET, the JSON body otherwise; a field named in the path is a path
parameter); its record is whatever its return annotation says, which is also
the response's schema in the OpenAPI document and what the CLI's client
rebuilds from JSON. Where it acts decides the path's prefix:

- ``acting``: in a Workspace the user belongs to, ``/v1/workspaces/{workspace}``;
- ``named``: on a Workspace by name without membership (staff crediting it);
- ``user``: on the user alone (their Workspaces, their tokens), ``/v1``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, unquote

from pydantic import BaseModel, TypeAdapter

from amber_pipeline.accounts import audit, identity, workspaces
from amber_pipeline.warehouse.catalog import Warehouse

Where = Literal["acting", "named", "user"]
PREFIX = {"acting": "/v1/workspaces/{workspace}", "named": "/v1/workspaces/{workspace}", "user": "/v1"}
DEFAULT_IN_PATH = "~"  # a Workspace path naming the user's default Workspace ("default", made on first use)


@dataclass(frozen=True)
class Acting:
    """The warehouse, the actor and the Workspace they act in (membership checked for ``acting`` operations)."""

    wh: Warehouse
    actor: identity.Actor
    workspace: str


class NoParams(BaseModel):
    pass


@dataclass(frozen=True)
class Operation:
    name: str
    method: str
    path: str  # after the prefix of `where`
    where: Where
    params: type[BaseModel]
    returns: Any
    run: Callable[[Acting, Any], Any]
    summary: str
    description: str
    area: str  # its module (`operations/jobs.py`: "jobs"), which groups it in the API's documentation
    uploads: tuple[str, ...] = ()  # params fields that name files the client sends with the request

    @property
    def route(self) -> str:
        return PREFIX[self.where] + self.path

    @functools.cached_property
    def path_fields(self) -> list[str]:
        return [f for f in self.params.model_fields if "{" + f + "}" in self.path]

    def path_for(self, workspace: str | None, values: Mapping[str, Any]) -> str:
        """The request's path: the Workspace (None: the user's default) and the path fields from `values`."""
        return self.route.format(workspace=path_value(workspace or DEFAULT_IN_PATH),
                                 **{f: path_value(str(values[f])) for f in self.path_fields})

    def wire(self, result: Any) -> Any:
        """The record as JSON-able data: what goes over HTTP."""
        return _adapter(self.returns).dump_python(result, mode="json")

    def record(self, data: Any) -> Any:
        """The record back from JSON-able data."""
        return _adapter(self.returns).validate_python(data)


OPERATIONS: dict[str, Operation] = {}


@functools.cache
def _adapter(returns: Any) -> TypeAdapter[Any]:
    """One adapter per record type: building one costs milliseconds, on every request otherwise."""
    return TypeAdapter(returns)


def operation(method: str, path: str, *, where: Where = "acting", uploads: tuple[str, ...] = ()
              ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `(acting, params) -> record` as an operation named after the function. It runs for its actor
    (`audit.acting_as`), whichever face asks for it (the CLI in its own process, or the server over HTTP), so an
    action the core library logs without being told who took it (a start, a cancel, a token made) names them."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        hints = typing.get_type_hints(fn)
        takes = list(inspect.signature(fn).parameters)
        params = hints[takes[1]] if len(takes) > 1 else NoParams
        doc = inspect.getdoc(fn) or fn.__name__
        summary, _, description = doc.partition("\n\n")

        def run(acting: Acting, given: Any) -> Any:
            with audit.acting_as(acting.actor.user):
                return fn(acting, given) if len(takes) > 1 else fn(acting)

        OPERATIONS[fn.__name__] = Operation(fn.__name__, method, path, where, params, hints["return"], run,
                                            summary.replace("\n", " "), description,
                                            fn.__module__.rsplit(".", 1)[-1], uploads)
        return fn

    return register


def acting(wh: Warehouse, actor: identity.Actor, op: Operation) -> Acting:
    """Who acts where for `op`: an ``acting`` operation checks membership (and with no Workspace named, gives
    the user's default). A read (GET) changes nothing, not even a first user's default Workspace; Quotes past
    their hour are released by the daemon's schedule and by the writes that need their money."""
    if op.where == "acting":
        return in_workspace(wh, actor, reads=op.method == "GET")
    return Acting(wh, actor, actor.workspace or identity.DEFAULT_WORKSPACE)


def in_workspace(wh: Warehouse, actor: identity.Actor, *, reads: bool = False) -> Acting:
    """The actor in their chosen Workspace (membership checked), else their default (made on a first write)."""
    return Acting(wh, actor, workspaces.acting_workspace(wh, actor, make_default=not reads))


def perform(wh: Warehouse, actor: identity.Actor, op: Operation, params: BaseModel) -> Any:
    """`op` run for `actor` where it acts (`acting`), for the server's routes and the CLI alike. A read (GET)
    changes nothing, so on DuckDB its reads share one connection to the catalog, opened once: a Job's status is a
    dozen reads, which a follower asks for at every step of the Job, each taking the catalog's lock from the
    cell run's writes otherwise."""
    with wh.reading() if op.method == "GET" else contextlib.nullcontext():
        return op.run(acting(wh, actor, op), params)


def call_local(wh: Warehouse, actor: identity.Actor, name: str, params: BaseModel | None = None) -> Any:
    """Run an operation in this process for `actor` (in their Workspace), its record passed through the wire
    format as the API's would be, so both modes print from the same data."""
    op = OPERATIONS[name]
    result = perform(wh, actor, op, params if params is not None else op.params())
    return op.record(json.loads(json.dumps(op.wire(result))))



def path_value(text: str) -> str:
    """`text` as one path segment, whatever it holds: percent-encoded twice, dots too, since a server decodes a
    path once before routing (a '/' would split it, '..' would climb); `from_path` decodes it once more."""
    return quote(quote(text, safe=""), safe="").replace(".", "%252E")


def from_path(routed: str) -> str:
    """A path value as its sender meant it, once the server has routed on it (`path_value`)."""
    return unquote(routed)
