"""`python -m server --host H --port P [--public-url URL]`: the hosted API on uvicorn, with the Dagster UI
under /ui.

`amber serve` starts this process (beside the instance's daemon, as `amber ui`
starts the webserver) with AMBER_HOME and DAGSTER_HOME set. It lives in the
thin Dagster layer, outside the core library, because the UI it mounts is
Dagster's own ASGI app. Its redirects name the public URL (`public_url.py`).
"""

from __future__ import annotations

import argparse
import sys

import uvicorn
from fastapi import FastAPI

from amber_pipeline.analysis.memo import Memo
from amber_pipeline.errors import AmberError
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from server.dagster_ui import dagster_ui
from server.loopback import LoopbackHosts
from server.public_url import PublicRedirects, checked
from server.routes import create_app
from web.sessions import Sessions
from web.webapp import create_web

SWITCH_INTERVAL_S = 0.001  # how long a thread holds the interpreter before another may take it (Python's default: 5 ms)


def app(paths: AmberPaths, public_url: str | None = None, local: bool = False) -> FastAPI:
    """The API over the instance in `paths`, the Dagster UI mounted behind its sign-in, and the web app at /; every
    redirect names `public_url` (None: its path alone), never the Host a request sent. `local`: the embedded
    default's (`amber ui`), whose web pages are the local user's without sign-in."""
    public = None if public_url is None else checked(public_url)
    wh = Warehouse(paths)
    sessions = Sessions()  # one sign-in for the web app and the Dagster UI
    ui = dagster_ui(paths, wh, local, sessions)
    api = create_app(paths, ui=ui, on_close=ui.close)
    # The web app's routes, not a mount at "/", which would take every path: the server's own answers stay for the
    # rest (404, "/ui" redirected to "/ui/")
    api.router.routes.extend(create_web(wh, local=local, sessions=sessions).routes)
    api.add_middleware(PublicRedirects, public_url=public)
    if local:
        api.add_middleware(LoopbackHosts)
    return api


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--public-url", help="The URL people open the server at (e.g. https://amber.example.com), "
                                             "which redirects name; default: a redirect names its path alone.")
    parser.add_argument("--local", action="store_true", help="The embedded default's server (`amber ui`): the web "
                                                                 "pages are the local user's, without sign-in.")
    given = parser.parse_args()
    Memo.freeze_kept = True  # a server: what it keeps lives long (`memo.py`)
    # A request's thread gives up the interpreter at each catalog statement and waits to get it back while others
    # compute: at Python's default 5 ms turns, a Quote's dozen statements waited longer than they ran
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        served = app(AmberPaths.from_env(), given.public_url, given.local)
    except AmberError as e:
        parser.exit(2, f"amber serve: {e}\n")
    uvicorn.run(served, host=given.host, port=given.port, ws="websockets-sansio", log_level="warning",
                timeout_graceful_shutdown=10)


if __name__ == "__main__":
    main()
