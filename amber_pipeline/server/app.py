"""The FastAPI app of a hosted Amber.

Each registered operation becomes one route, documented in the OpenAPI
document from its params model, its record type and its docstring. A request
signs in with `Authorization: Bearer <token>`; the token names the user, so
nothing the client says can make it someone else, and the user is held in
`identity.SIGNED_IN` while the operation runs, so the embedded default's
rule that the local login is staff never applies to it.

Errors a user can fix answer with one sentence as ``{"detail": ...}``: 401 for
no valid token, 403 for a role the user lacks, 404 for something missing (and
for another Workspace's objects, which read exactly as missing ones), 400 for
the rest. Any other failure is a 500 without detail, logged by the server.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, FastAPI, File, Form, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ValidationError, create_model
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from amber_pipeline.api.operations import DEFAULT_IN_PATH, Operation, acting, from_path
from amber_pipeline.api.registry import OPERATIONS
from amber_pipeline.auth import tokens
from amber_pipeline.benchmarks.intake.archive import LIMITS
from amber_pipeline.errors import AmberError, Forbidden, NotFound
from amber_pipeline.money import identity
from amber_pipeline.money.user_text import quoted
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

BEARER = HTTPBearer(auto_error=False, description="A personal API token (`amber token create`).")
MAX_REQUEST_BYTES = 1 << 30  # a dataset file for `benchmark adapt` may be large; an archive is refused past 100 MB
STATUS = {tokens.SignInRefused: 401, Forbidden: 403, NotFound: 404}
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "A request Amber refuses, in one sentence (`detail`)."},
    401: {"description": "No valid token: missing, unknown, revoked or expired."},
    403: {"description": "The user lacks the role this needs (staff, operator)."},
    404: {"description": "Nothing by that name or id among the user's: another Workspace's reads the same."},
}


def status_of(error: AmberError) -> int:
    return next((code for kind, code in STATUS.items() if isinstance(error, kind)), 400)


def create_app(paths: AmberPaths, ui: ASGIApp | None = None, on_close: Callable[[], None] | None = None,
               max_request_bytes: int = MAX_REQUEST_BYTES) -> FastAPI:
    """The API over the instance in `paths`; `ui`, if given, is mounted at /ui (the Dagster UI behind sign-in), and
    `on_close` runs when the server stops (a mounted app hears no lifespan events of its own)."""
    wh = Warehouse(paths)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if on_close is not None:
            await anyio.to_thread.run_sync(on_close)

    app = FastAPI(title="Amber", version="1", lifespan=lifespan,
                  description="Which AI model and agent to choose, with honest uncertainty. Sign in with "
                              "`Authorization: Bearer <token>` (a personal API token from `amber token create`). "
                              f"In a Workspace path, `{DEFAULT_IN_PATH}` names your default Workspace. A path "
                              "value is decoded once more after routing, so any text travels in it encoded twice "
                              "(`%252F` for '/').")

    @app.exception_handler(AmberError)
    async def _refused(_request: Request, error: AmberError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=status_of(error))

    @app.exception_handler(RequestValidationError)
    async def _malformed(_request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": malformed(error.errors())}, status_code=400)

    for op in OPERATIONS.values():
        app.add_api_route(op.route, _endpoint(wh, op), methods=[op.method], name=op.name, summary=op.summary,
                          description=op.description, response_model=op.returns, responses=ERRORS,
                          tags=[op.run.__module__.rsplit(".", 1)[-1]])
    if ui is not None:
        app.mount("/ui", ui)
    app.add_middleware(BodyLimit, most=max_request_bytes)
    return app


def _endpoint(wh: Warehouse, op: Operation) -> Callable[..., Any]:
    """A route function for `op`, its signature made from the op's path and params so FastAPI documents and
    parses them: path fields as path parameters, the rest as query parameters (GET), a JSON body, or (an upload)
    a file plus the params as a JSON form field."""

    def endpoint(token: tokens.Token, **given: Any) -> JSONResponse:
        identity.SIGNED_IN.set(token.user)  # this request's context only
        workspace = from_path(given.pop("workspace", "")) or None
        actor = identity.Actor(token.user, None if workspace == DEFAULT_IN_PATH else workspace)
        with contextlib.ExitStack() as stack:
            params, named = _params(op, given, stack)
            try:
                result = op.run(acting(wh, actor, op), params)
            except AmberError as e:  # a sentence names a file the way its user did, not where it was spooled
                for spooled, as_named in named.items():
                    e.args = (str(e).replace(spooled, as_named),)
                raise
        return JSONResponse(op.wire(result))

    def signed_in(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> tokens.Token:
        """The token's owner (a dependency, so it is checked before the request's params are)."""
        return tokens.verify(wh, None if credentials is None else credentials.credentials)

    shown = [_param("token", Annotated[tokens.Token, Depends(signed_in)])]
    if "{workspace}" in op.route:
        shown.append(_param("workspace", str))
    for name in op.path_fields:
        shown.append(_param(name, str))
    if op.uploads:
        for name in op.uploads:
            described = File(description=op.params.model_fields[name].description)
            shown.append(_param(name, Annotated[UploadFile | None, described], default=None))
        others = ", ".join(f for f in op.params.model_fields if f not in op.uploads)
        shown.append(_param("params", Annotated[str, Form(description=f"The rest, as a JSON object: {others}")]))
    elif len(op.params.model_fields) > len(op.path_fields):
        rest = _without(op.params, op.path_fields)
        shown.append(_param("query", Annotated[rest, Query()]) if op.method == "GET" else _param("body", rest))
    endpoint.__signature__ = inspect.Signature(shown)  # type: ignore[attr-defined]
    endpoint.__name__ = op.name
    return endpoint


def _without(model: type[BaseModel], path_fields: list[str]) -> type[BaseModel]:
    """The params model less the fields the path carries (the same model when there are none)."""
    if not path_fields:
        return model
    kept = {name: (f.annotation, f) for name, f in model.model_fields.items() if name not in path_fields}
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
            fields |= json.loads(given.pop("params"))
        except (json.JSONDecodeError, TypeError):
            raise AmberError("The params form field is not a JSON object: send the request's params as JSON.") from None
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


def malformed(errors: Sequence[Any]) -> str:
    """A request whose params do not fit their model, as one sentence: the first field at fault and why."""
    first = errors[0]
    return f"{'.'.join(map(str, first['loc']))}: {first['msg']}; fix the request."


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
    """Refuse a request body past `most` bytes (413), by its Content-Length or as it arrives: the multipart
    parser spools a file to disk before any route sees it, so this bounds the disk one request can take."""

    def __init__(self, app: ASGIApp, most: int) -> None:
        self.app, self.most = app, most

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.most:
            await JSONResponse({"detail": self.sentence}, status_code=413)(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.most:
                raise AmberError(self.sentence)
            return message

        await self.app(scope, counted, send)

    @property
    def sentence(self) -> str:
        return (f"The request is larger than {self.most >> 20} MB: send a smaller archive or file (an upload may be "
                f"{LIMITS.compressed_bytes >> 20} MB).")
