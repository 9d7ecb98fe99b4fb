"""Harbor's viewer over a Job's run folder, read-only (`amber view JOB`).

`harbor view` has no read-only mode. On a folder of jobs its API always offers what changes the folder: Delete
(`DELETE /api/jobs/{job}`, a `shutil.rmtree` of the job folder), Summarize (runs an analysis Agent and writes
analysis.json into it), a launcher that starts `harbor run` into the folder, upload to Harbor Hub, and editor
streams into sandboxes. No layout of Amber's folders makes its Delete refuse: it resolves the job folder and
checks it lies inside the folder given exactly as every read does, so whatever the pages can read it can
remove; file modes bind neither root nor, for an owner, the Trials rmtree reaches before its first refusal
(it deletes in directory order), and Amber's own writers need the folders writable.

So Amber serves Harbor's own viewer (its pages and API unchanged) behind a gate that lets through only the
GET and HEAD requests of its reading routes; every other request is refused before the viewer sees it. The
pages still draw their Delete and Summarize buttons (they have no setting to hide them): pressing one shows
the refusal and the folder stays as it was.
"""

from __future__ import annotations

import re
from pathlib import Path

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

READ_METHODS = frozenset({"GET", "HEAD"})
# Reading routes that still act: Harbor Hub's sign-in and upload status (network calls, credentials written),
# the `harbor run` launcher's pages, and the editor streams into sandboxes.
ACTING_READS = re.compile(r"^/(?:api/auth/|auth/|api/run(?:/|$)|api/jobs/[^/]+/upload$"
                          r"|api/jobs/[^/]+/trials/[^/]+/stream$)")
READ_ONLY = "Amber's run folders are read-only in this viewer: change a Job with `amber job` instead."


def read_only_viewer(folder: Path) -> ASGIApp:
    """Harbor's viewer (pages and API) over `folder`, a folder of Harbor job folders, behind `ReadOnly`."""
    from harbor.cli.view import STATIC_DIR
    from harbor.viewer import create_app

    return ReadOnly(create_app(folder.resolve(), mode="jobs", static_dir=STATIC_DIR if STATIC_DIR.exists() else None))


class ReadOnly:
    """An ASGI gate: a GET or HEAD of a reading route reaches the app; any other request is answered 405 (403
    for a reading route that acts) and a websocket is closed, before the app sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.close", "code": 4403})
            return
        path = scope["path"][len(scope.get("root_path", "")):] if scope.get("root_path") else scope["path"]
        if scope["method"] not in READ_METHODS:
            await JSONResponse({"detail": READ_ONLY}, status_code=405, headers={"Allow": "GET, HEAD"})(
                scope, receive, send)
        elif ACTING_READS.match(path):
            await JSONResponse({"detail": READ_ONLY}, status_code=403)(scope, receive, send)
        else:
            await self.app(scope, receive, send)
