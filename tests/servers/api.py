"""The hosted API on loopback for the CLI's tests: the same FastAPI app `amber serve` runs, on uvicorn in a
thread of the test process, over the test's AMBER_HOME; and each user's token, made the way the server's host
makes them (`users.add`, `tokens.create`).

With it on (`tests/conftest.py`'s `cli_mode` fixture, "api"), `helpers.cli` runs every command as the API's
client: `--user NAME` is taken off the command line (the client refuses it) and becomes NAME's token, and the
local login (staff on the embedded default) is a user with the staff role.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from amber_pipeline.accounts import tokens, users
from amber_pipeline.accounts.identity import local_user
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from server.routes import create_app

STARTUP_S = 20


@dataclass
class ApiServer:
    paths: AmberPaths
    server: uvicorn.Server
    thread: threading.Thread
    url: str
    tokens: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, paths: AmberPaths, **options: Any) -> ApiServer:
        """`create_app(paths, **options)` served on a free loopback port, once it answers."""
        server = uvicorn.Server(uvicorn.Config(create_app(paths, **options), host="127.0.0.1", port=0,
                                               log_level="warning", lifespan="off", ws="websockets-sansio"))
        thread = threading.Thread(target=server.run, name="amber-api", daemon=True)
        thread.start()
        deadline = time.monotonic() + STARTUP_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        return cls(paths, server, thread, f"http://127.0.0.1:{port}")

    def token(self, user: str) -> str:
        """`user`'s token (made once): staff for the local login, as on the embedded default."""
        if user not in self.tokens:
            wh = Warehouse(self.paths)
            users.add(wh, user, "tests", ("staff",) if user == local_user() else ())
            self.tokens[user] = tokens.create(wh, user).secret
        return self.tokens[user]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


class ApiMode:
    """The servers of one test, one per AMBER_HOME it uses (made on first use)."""

    def __init__(self) -> None:
        self.servers: dict[AmberPaths, ApiServer] = {}

    def client(self, args: list[str], env: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of `amber ARGS` as the API's client."""
        home = (env or {}).get("AMBER_HOME") or os.environ.get("AMBER_HOME", ".amber")
        paths = AmberPaths(Path(home).resolve())  # the instance this command would have opened
        if paths not in self.servers:
            self.servers[paths] = ApiServer.start(paths)
        server = self.servers[paths]
        user, rest, i = local_user(), [], 0
        while i < len(args) and args[i].startswith("--"):  # the root's options, before the command
            if args[i] == "--user":
                user, i = args[i + 1], i + 2
            elif args[i].startswith("--user="):
                user, i = args[i].removeprefix("--user="), i + 1
            else:
                width = 2 if args[i] == "--workspace" else 1
                rest, i = rest + args[i:i + width], i + width
        rest += args[i:]
        return rest, {**(env or {}), "AMBER_URL": server.url, "AMBER_TOKEN": server.token(user)}

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
