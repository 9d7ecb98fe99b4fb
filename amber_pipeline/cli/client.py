"""The CLI as the hosted API's client: where the server is, the user's token, and one call.

With `AMBER_URL` (or the `url` that `amber login` saved) and a token (`AMBER_TOKEN`, or the token file `amber
login` wrote), every command asks the server instead of opening an instance here: the operation named runs there
for whoever the token says, and its record comes back to be printed exactly as on the embedded default. The token
file is readable by its owner only; one that others could read is refused, as ssh refuses such a key.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from amber_pipeline.accounts import identity
from amber_pipeline.errors import AmberError, Forbidden, NotFound, SignInRefused
from amber_pipeline.warehouse.files import private_text

if TYPE_CHECKING:  # the HTTP client and the operations are loaded by the first call to a server
    import ssl

    import httpx
    from pydantic import BaseModel

    from amber_pipeline.operations.operation import Operation

TIMEOUT_S = 600.0  # an upload of 100 MB, or a long SQL query, answers within this
KINDS: dict[int, type[AmberError]] = {401: SignInRefused, 403: Forbidden, 404: NotFound}


@functools.cache
def tls() -> ssl.SSLContext:
    """The verifying TLS context every client of this process shares: httpx reads the whole CA bundle again for
    each client it makes otherwise (35 ms of CPU each), which a process making many calls pays every time."""
    import httpx

    return httpx.create_ssl_context()


def token_path() -> Path:
    return identity.config_path().parent / "token"


def server_url() -> str | None:
    return os.environ.get("AMBER_URL") or identity.load_config().get("url")


def saved_token() -> str | None:
    """The token from AMBER_TOKEN, else from the token file (refused if others can read it)."""
    if os.environ.get("AMBER_TOKEN"):
        return os.environ["AMBER_TOKEN"].strip()
    text = private_text(token_path())
    return None if text is None else text.strip()


def save_token(url: str, token: str) -> Path:
    """The token into a file only its owner can read (created so, never widened first), the URL into the config."""
    path = token_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as sink:
        os.fchmod(sink.fileno(), 0o600)
        sink.write(token + "\n")
    identity.save_config({"url": url})
    return path


@dataclass(frozen=True)
class Remote:
    url: str
    token: str | None

    @classmethod
    def from_env(cls) -> Remote | None:
        url = server_url()
        return None if not url else cls(url.rstrip("/"), saved_token())

    def call(self, op: Operation, workspace: str | None, params: BaseModel) -> Any:
        """Run `op` on the server for the token's user in `workspace` (None: their default)."""
        import httpx

        path = op.path_for(workspace, params.model_dump())
        rest = params.model_dump(mode="json", exclude=set(op.path_fields))
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            with httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT_S, verify=tls()) as http:
                if op.uploads:
                    response = self._send(http, op, path, rest)
                elif op.method == "GET":
                    response = http.request(op.method, path, params={k: v for k, v in rest.items() if v is not None})
                else:  # NaN too (as Python's JSON writes it), so the server refuses it with its own sentence
                    response = http.request(op.method, path, content=json.dumps(rest),
                                            headers={"content-type": "application/json"})
        except httpx.HTTPError as e:
            raise AmberError(f"Cannot reach the Amber server at {self.url} ({type(e).__name__}): check AMBER_URL, "
                             "or that `amber serve` runs there.") from None
        if response.is_success:
            return op.record(response.json())
        raise KINDS.get(response.status_code, AmberError)(_detail(response))

    @staticmethod
    def _send(http: httpx.Client, op: Operation, path: str, rest: dict[str, Any]) -> httpx.Response:
        """A request that brings files: each (if named) under its params field's name, the rest as a JSON form
        field."""
        named = {name: rest.pop(name) for name in op.uploads}
        with contextlib.ExitStack() as stack:
            files = {name: (Path(f).name, stack.enter_context(_opened(Path(f))))
                     for name, f in named.items() if f is not None}
            return http.request(op.method, path, files=files or None, data={"params": json.dumps(rest | named)})


def _opened(file: Path) -> BinaryIO:
    try:
        return file.open("rb")
    except OSError:
        raise AmberError(f"No file at {file}: give the path of a file you can read.") from None


@contextlib.contextmanager
def folder_archive(folder: Path) -> Iterator[Path]:
    """A folder as a server takes it: NAME.tar.gz holding the folder NAME (links kept as links, which the server
    refuses as it refuses them in an upload), removed after the call."""
    from amber_pipeline.operations.jobs import FOLDER_SUFFIX

    name = folder.resolve().name
    with tempfile.TemporaryDirectory(prefix="amber-folder-") as spool:
        archive = Path(spool) / (name + FOLDER_SUFFIX)
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(folder, arcname=name)
        yield archive


def _detail(response: httpx.Response) -> str:
    """The server's one sentence, or one made of the status when it gave none (a proxy's page, a 500)."""
    try:
        detail = response.json().get("detail")
    except (json.JSONDecodeError, AttributeError):
        detail = None
    if isinstance(detail, str):
        return detail
    return (f"The Amber server answered {response.status_code} {response.reason_phrase}: try again, and tell its "
            "operators if it persists.")
