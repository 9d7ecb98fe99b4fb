"""`python -m server --host H --port P [--public-url URL]`: the hosted API on uvicorn, with the Dagster UI
under /ui.

`amber serve` starts this process (beside the instance's daemon, as `amber ui`
starts the webserver) with AMBER_HOME and DAGSTER_HOME set. It lives in the
thin Dagster layer, outside the core library, because the UI it mounts is
Dagster's own ASGI app. Its redirects name the public URL (`public_url.py`).
"""

from __future__ import annotations

import argparse

import uvicorn
from fastapi import FastAPI

from amber_pipeline.errors import AmberError
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from server.dagster_ui import dagster_ui
from server.public_url import PublicRedirects, checked
from server.routes import create_app


def app(paths: AmberPaths, public_url: str | None = None) -> FastAPI:
    """The API over the instance in `paths`, the Dagster UI mounted behind its sign-in; every redirect names
    `public_url` (None: its path alone), never the Host a request sent."""
    public = None if public_url is None else checked(public_url)
    ui = dagster_ui(paths, Warehouse(paths))
    api = create_app(paths, ui=ui, on_close=ui.close)
    api.add_middleware(PublicRedirects, public_url=public)
    return api


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--public-url", help="The URL people open the server at (e.g. https://amber.example.com), "
                                             "which redirects name; default: a redirect names its path alone.")
    given = parser.parse_args()
    try:
        served = app(AmberPaths.from_env(), given.public_url)
    except AmberError as e:
        parser.exit(2, f"amber serve: {e}\n")
    uvicorn.run(served, host=given.host, port=given.port, ws="websockets-sansio", log_level="warning",
                timeout_graceful_shutdown=10)


if __name__ == "__main__":
    main()
