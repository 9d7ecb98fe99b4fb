"""The FastAPI app of a hosted Amber.

Each registered operation becomes one route, documented in the OpenAPI
document from its params model, its record type and its docstring. A request
signs in with `Authorization: Bearer <token>`; the token names the user, so
nothing the client says can make it someone else, and the user is held in
`identity.SIGNED_IN` while the operation runs, so the embedded default's
rule that the local login is staff never applies to it.

Limits come before work. The token is checked (`SignIn`) before a byte of the
body is read, so a request without one costs the server nothing whatever it
sends; a body is bounded per route, small (`BODY_BYTES`) but for an upload's
file; a refusal quotes a bounded part of what it was sent (`user_text`).

Errors a user can fix answer with one sentence as ``{"detail": ...}``: 401 for
no valid token, 403 for a role the user lacks, 404 for something missing (and
for another Workspace's objects, which read exactly as missing ones), 413 for
a body past its route's limit, 400 for the rest. Any other failure is a 500
without detail, logged by the server.

`/docs` and `/redoc` load their scripts from the package (`fastapi_offline`),
not a CDN: a server with no way out still shows them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, File, Form, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ValidationError, create_model
from starlette.datastructures import Headers
from starlette.routing import BaseRoute, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from amber_pipeline.accounts import identity, tokens
from amber_pipeline.benchmarks.intake.archive import LIMITS
from amber_pipeline.errors import AmberError, Forbidden, NotFound
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.operations.operation import DEFAULT_IN_PATH, Operation, from_path, perform
from amber_pipeline.paths import AmberPaths
from amber_pipeline.user_text import clipped, quoted
from amber_pipeline.warehouse.catalog import Warehouse

BEARER = HTTPBearer(auto_error=False, description="A personal API token (`amber token create`).")
SIGNED_IN_ROOT = "/v1"  # every operation's route is under it (`operations.PREFIX`); the docs and /ui are not
BODY_BYTES = 1 << 20  # the body of any request but an upload's: params, a query, a Model Configuration's TOML
MAX_REQUEST_BYTES = 1 << 30  # an upload's: a dataset file for `benchmark adapt` may be large; an archive past 100 MB
STATUS = {tokens.SignInRefused: 401, Forbidden: 403, NotFound: 404}
_SERVED = "served_warehouse"  # the route function's parameter for its app's instance (`serving`); no op's is so named


class Refusal(BaseModel):
    """Every error's body: one sentence naming the problem and the fix."""

    detail: str


ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": Refusal, "description": text} for code, text in {
    400: "A request Amber refuses, in one sentence (`detail`): malformed params among them.",
    401: "No valid token: missing, unknown, revoked or expired.",
    403: "The user lacks the role this needs (staff, operator).",
    404: "Nothing by that name or id among the user's: another Workspace's reads the same.",
    413: f"A body past the route's limit: {BODY_BYTES >> 20} MB, more for an upload's file.",
}.items()}


def status_of(error: AmberError) -> int:
    return next((code for kind, code in STATUS.items() if isinstance(error, kind)), 400)


def create_app(paths: AmberPaths, ui: ASGIApp | None = None, on_close: Callable[[], None] | None = None,
               max_request_bytes: int = MAX_REQUEST_BYTES) -> FastAPI:
    """The API over the instance in `paths`; `ui`, if given, is mounted at /ui (the Dagster UI behind sign-in), and
    `on_close` runs when the server stops (a mounted app hears no lifespan events of its own). An upload's body
    may hold `max_request_bytes`, any other `BODY_BYTES`."""
    wh = Warehouse(paths)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if on_close is not None:
            await anyio.to_thread.run_sync(on_close)

    app = FastAPIOffline(
        title="Amber", version="1", lifespan=lifespan,
        description="Which AI model and agent to choose, with honest uncertainty. Sign in with `Authorization: Bearer "
                    "<token>` (a personal API token from `amber token create`). In a Workspace path, "
                    f"`{DEFAULT_IN_PATH}` names your default Workspace. A path value is decoded once more after "
                    "routing, so any text travels in it encoded twice (`%252F` for '/').")

    @app.exception_handler(AmberError)
    async def _refused(_request: Request, error: AmberError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=status_of(error))

    @app.exception_handler(RequestValidationError)
    async def _malformed(_request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": malformed(error.errors())}, status_code=400)

    app.router.routes.extend(_operation_routes())
    _without_422(app)
    if ui is not None:
        app.mount("/ui", ui)
    app.add_middleware(BodyLimit, upload_bytes=max_request_bytes)
    app.add_middleware(SignIn, wh=wh)  # the outer one: a request without a token is refused before any limit
    return app


@functools.cache
def _operation_routes() -> tuple[BaseRoute, ...]:
    """Every operation's route, made once per process and shared by every app it makes: FastAPI makes a route's
    validators (pydantic's, for its params and its record) as it adds it, about 0.07 s of CPU for all. A route
    finds the instance it serves in the request (`serving`), not in itself."""
    router = APIRouter()
    for op in OPERATIONS.values():
        assert op.route.startswith(SIGNED_IN_ROOT + "/"), op.route
        router.add_api_route(op.route, _endpoint(op), methods=[op.method], name=op.name, summary=op.summary,
                             description=op.description, response_model=op.returns, responses=ERRORS,
                             tags=[op.area], dependencies=[Depends(BEARER)])
    return tuple(router.routes)


def _without_422(app: FastAPI) -> None:
    """The OpenAPI document without FastAPI's 422 "Validation Error", which this server never sends: malformed
    params are a 400 with one sentence, like any other refusal."""
    made = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = made()
            for path in schema.get("paths", {}).values():
                for operation in path.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _endpoint(op: Operation) -> Callable[..., Any]:
    """A route function for `op`, its signature made from the op's path and params so FastAPI documents and
    parses them: path fields as path parameters, the rest as query parameters (GET), a JSON body, or (an upload)
    a file plus the params as a JSON form field."""
    assert _SERVED not in op.params.model_fields, op.name

    def endpoint(token: tokens.Token, **given: Any) -> JSONResponse:
        wh: Warehouse = given.pop(_SERVED)
        identity.SIGNED_IN.set(token.user)  # this request's context only
        workspace = from_path(given.pop("workspace", "")) or None
        actor = identity.Actor(token.user, None if workspace == DEFAULT_IN_PATH else workspace)
        with contextlib.ExitStack() as stack:
            params, named = _params(op, given, stack)
            try:
                result = perform(wh, actor, op, params)
            except AmberError as e:  # a sentence names a file the way its user did, not where it was spooled
                for spooled, as_named in named.items():
                    e.args = (str(e).replace(spooled, as_named),)
                raise
        return JSONResponse(op.wire(result))

    shown = [_param("token", Annotated[tokens.Token, Depends(signed_in)]),
             _param(_SERVED, Annotated[Warehouse, Depends(serving)])]
    if "{workspace}" in op.route:
        shown.append(_param("workspace", str))
    for name in op.path_fields:
        shown.append(_param(name, str))
    if op.uploads:
        for name in op.uploads:
            described = File(description=op.params.model_fields[name].description)
            shown.append(_param(name, Annotated[UploadFile | None, described], default=None))
        rest = _without(op.params, [*op.uploads, *op.path_fields])
        shown.append(_param("params", Annotated[str, Form(
            description=f"The rest, as a JSON object: {', '.join(rest.model_fields)}",
            json_schema_extra={"contentMediaType": "application/json", "contentSchema": rest.model_json_schema()})]))
    elif len(op.params.model_fields) > len(op.path_fields):
        rest = _without(op.params, op.path_fields)
        shown.append(_param("query", Annotated[rest, Query()]) if op.method == "GET" else _param("body", rest))
    endpoint.__signature__ = inspect.Signature(shown)  # type: ignore[attr-defined]
    endpoint.__name__ = op.name
    return endpoint


def signed_in(request: Request) -> tokens.Token:
    """The token's owner, as `SignIn` found it before the body was read."""
    token: tokens.Token = request.scope[SignIn.SCOPE_KEY]
    return token


def serving(request: Request) -> Warehouse:
    """The instance of the app the request came to (`SignIn` keeps it in the request's scope)."""
    wh: Warehouse = request.scope[SignIn.WAREHOUSE_KEY]
    return wh


def _without(model: type[BaseModel], fields: list[str]) -> type[BaseModel]:
    """The params model less `fields` (those the path or the request's files carry; the same model when none)."""
    if not fields:
        return model
    kept = {name: (f.annotation, f) for name, f in model.model_fields.items() if name not in fields}
    return create_model(model.__name__ + "Body", __doc__=model.__doc__, **kept)  # type: ignore[call-overload]


def _param(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def _params(op: Operation, given: dict[str, Any], stack: contextlib.ExitStack) -> tuple[Any, dict[str, str]]:
    """The op's params from the route's parts, and the files spooled for it with the names their user gave
    them. An uploaded file is spooled to a file the op reads, in a folder outside AMBER_HOME (which no upload
    may name) removed with `stack`; the name the client sent in its place is only ever shown."""
    fields: dict[str, Any] = {name: from_path(given.pop(name)) for name in op.path_fields}
    named: dict[str, str] = {}
    for part in ("query", "body"):
        if part in given:
            fields |= given.pop(part).model_dump()
    if op.uploads:
        try:
            sent = json.loads(given.pop("params"))
        except (json.JSONDecodeError, TypeError):
            sent = None
        if not isinstance(sent, dict):
            raise AmberError("The params form field is not a JSON object: send the request's params as JSON.")
        fields |= sent
        for name in op.uploads:  # the only way a file reaches an op: never a path the client names
            file, as_named = given.pop(name), fields.get(name)
            fields[name] = None if file is None else str(_spool(file, Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="amber-upload-")))))
            if fields[name] is not None and isinstance(as_named, str) and as_named:
                named[fields[name]] = as_named
    try:
        return op.params.model_validate(fields), named
    except ValidationError as e:
        raise AmberError(malformed(e.errors())) from None


_NAME = re.compile(r"\w{1,64}", re.ASCII)  # a part of a field's place shown as it is; any other is quoted


def malformed(errors: Sequence[Any]) -> str:
    """A request whose params do not fit their model, as one sentence: the first field at fault and why. A part of
    the field's place may be a name the request made up (an extra key), and pydantic's reason may carry the value,
    so both are bounded."""
    first = errors[0]
    where = ".".join(str(part) if _NAME.fullmatch(str(part)) else quoted(str(part)) for part in first["loc"])
    return f"{where}: {clipped(first['msg'])}; fix the request."


def _spool(upload: UploadFile, spool: Path) -> Path:
    """The uploaded file under its own name (which an upload records and a folder is unpacked by)."""
    name = Path(upload.filename or "").name
    if name in ("", ".", ".."):
        raise AmberError(f"{quoted(upload.filename or '')} is not a file name: name the file you send.")
    target = spool / name
    with target.open("wb") as sink:
        shutil.copyfileobj(upload.file, sink, 1 << 20)
    return target


class BodyLimit:
    """Refuse a body past its route's limit (413): `BODY_BYTES`, or `upload_bytes` for an upload's route, by its
    Content-Length before a byte is read, or as it arrives. The multipart parser spools a file to disk before any
    route sees it, so this bounds the disk one request can take; every other body is parsed in memory, so it is
    kept small."""

    def __init__(self, app: ASGIApp, upload_bytes: int) -> None:
        self.app, self.upload_bytes = app, upload_bytes
        self.uploads = [(op.method, compile_path(op.route)[0]) for op in OPERATIONS.values() if op.uploads]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        upload = any(scope["method"] == method and route.fullmatch(path) for method, route in self.uploads)
        most = self.upload_bytes if upload else BODY_BYTES
        refusal = JSONResponse({"detail": too_large(most, upload)}, status_code=413)
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > most:
            await refusal(scope, receive, send)
            return
        seen, past, started = 0, False, False

        async def counted() -> Message:
            nonlocal seen, past
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > most:
                past = True
                raise BodyTooLarge
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            if past and not started:  # the app's own answer to a body cut short (FastAPI's 400): ours replaces it
                return
            started = True
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except Exception:
            if not past or started:
                raise
        if past and not started:
            await refusal(scope, receive, send)


class BodyTooLarge(Exception):
    """A body went past its route's limit as it arrived (`BodyLimit` answers for it)."""


def too_large(most: int, upload: bool) -> str:
    """The sentence refusing a body past `most` bytes, an upload's or another request's."""
    if upload:
        return (f"The request is larger than {most >> 20} MB: send a smaller archive or file (an upload may be "
                f"{LIMITS.compressed_bytes >> 20} MB).")
    return (f"The request is larger than {most >> 20} MB: send a smaller one (only an upload's archive or file may be "
            "larger).")


class SignIn:
    """Check the token of a request to an operation before its body is read, and answer 401 without reading it.

    FastAPI reads and parses a body before it solves a route's dependencies, so a token checked there comes after
    the body is in memory: anyone could make the server hold (and parse) a large body unsigned. The token found is
    kept in the request's scope for the route (`signed_in`), with the app's instance (`serving`)."""

    SCOPE_KEY = "amber.token"
    WAREHOUSE_KEY = "amber.warehouse"

    def __init__(self, app: ASGIApp, wh: Warehouse) -> None:
        self.app, self.wh = app, wh

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "").removeprefix(scope.get("root_path", ""))
        if scope["type"] != "http" or not (path == SIGNED_IN_ROOT or path.startswith(SIGNED_IN_ROOT + "/")):
            await self.app(scope, receive, send)
            return
        scheme, secret = get_authorization_scheme_param(Headers(scope=scope).get("authorization"))
        try:
            scope[self.SCOPE_KEY] = await anyio.to_thread.run_sync(
                tokens.verify, self.wh, secret if scheme.lower() == "bearer" else None)
        except tokens.SignInRefused as e:
            await JSONResponse({"detail": str(e)}, status_code=401)(scope, receive, send)
            return
        scope[self.WAREHOUSE_KEY] = self.wh
        await self.app(scope, receive, send)
