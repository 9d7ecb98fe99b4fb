"""`python -m api_server --host H --port P`: the hosted API on uvicorn, with the Dagster UI under /ui.

`amber serve` starts this process (beside the instance's daemon, as `amber ui`
starts the webserver) with AMBER_HOME and DAGSTER_HOME set. It lives in the
thin Dagster layer, outside the core library, because the UI it mounts is
Dagster's own ASGI app.
"""

from __future__ import annotations

import argparse

import uvicorn
from fastapi import FastAPI

from amber_pipeline.paths import AmberPaths
from amber_pipeline.server.app import create_app
from amber_pipeline.warehouse.catalog import Warehouse
from api_server.dagster_ui import dagster_ui


def app(paths: AmberPaths) -> FastAPI:
    """The API over the instance in `paths`, the Dagster UI mounted behind its sign-in."""
    ui = dagster_ui(paths, Warehouse(paths))
    return create_app(paths, ui=ui, on_close=ui.close)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m api_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    given = parser.parse_args()
    uvicorn.run(app(AmberPaths.from_env()), host=given.host, port=given.port, ws="websockets-sansio",
                log_level="warning", timeout_graceful_shutdown=10)


if __name__ == "__main__":
    main()
