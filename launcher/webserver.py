"""The Dagster webserver's apps for the hosted UI (`server/dagster_ui.py` gates them behind sign-in).

Dagster has no public way to serve its UI inside another ASGI server: the
webserver is made from a workspace process context and a code-server registry,
both internals. They are made here, in the one package that may touch Dagster's
internals (beside the run launcher and the run coordinator), so a Dagster
release that moves them breaks this module alone.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import TYPE_CHECKING

from starlette.types import ASGIApp

from amber_pipeline import embedded, settings
from amber_pipeline.paths import AmberPaths

if TYPE_CHECKING:
    from dagster import DagsterInstance
    from dagster._core.remote_representation.grpc_server_registry import GrpcServerRegistry

# dagster-webserver's defaults for a long-running server (its --db-* options)
DB_STATEMENT_TIMEOUT_MS, DB_POOL_RECYCLE_S, DB_POOL_MAX_OVERFLOW = 15000, 3600, 20


class DagsterApps:
    """The two Dagster webserver apps (read-only, writable) on the embedded instance, made on first use. They share
    the instance and the code server Dagster starts for a code location it loads itself, so operators and other
    staff see the same code and only one subprocess runs."""

    def __init__(self, paths: AmberPaths, prefix: str) -> None:
        self.paths = paths
        self.prefix = prefix
        self._lock = threading.Lock()
        self._stack = contextlib.ExitStack()
        self._apps: dict[bool, ASGIApp] = {}
        self._shared: tuple[DagsterInstance, GrpcServerRegistry] | None = None
        self._closed = False

    def made(self, writable: bool) -> ASGIApp | None:
        """The app if it is made already (and not closed): no thread needed to wait for the lock."""
        return None if self._closed else self._apps.get(writable)

    def app(self, writable: bool) -> ASGIApp:
        """The app, made now if need be (seconds: the instance and the code location load), once."""
        with self._lock:
            if self._closed:
                raise RuntimeError("The Dagster UI was closed.")
            if writable not in self._apps:
                self._apps[writable] = self._make(writable)
            return self._apps[writable]

    def close(self) -> None:
        """Close the Dagster apps, then the code server (waiting until its process has exited), then the instance."""
        with self._lock:
            self._closed = True
            self._apps.clear()
            self._shared = None
            self._stack.close()

    def _make(self, writable: bool) -> ASGIApp:
        # dagster is imported here, not at the top: it takes seconds, and only the first visit to the UI needs it
        from dagster._core.workspace.context import WorkspaceProcessContext
        from dagster._core.workspace.load_target import WorkspaceFileTarget
        from dagster_webserver.version import __version__
        from dagster_webserver.webserver import DagsterWebserver

        instance, registry = self._shared or self._start()
        target = WorkspaceFileTarget([str(settings.dagster_workspace())])
        context = self._stack.enter_context(WorkspaceProcessContext(
            instance, target, version=__version__, read_only=not writable, grpc_server_registry=registry))
        return DagsterWebserver(context, app_path_prefix=self.prefix).create_asgi_app()

    def _start(self) -> tuple[DagsterInstance, GrpcServerRegistry]:
        from dagster import DagsterInstance
        from dagster._core.remote_representation.grpc_server_registry import GrpcServerRegistry
        from dagster._core.workspace.context import WEBSERVER_GRPC_SERVER_HEARTBEAT_TTL
        from dagster._grpc.constants import GrpcServerCommand

        from launcher import code_servers

        _export_environment(self.paths)
        code_servers.install(self.paths.dagster_home)  # forked by the daemon's warm worker, when it answers
        instance = self._stack.enter_context(DagsterInstance.from_config(str(self.paths.dagster_home)))
        instance.optimize_for_webserver(DB_STATEMENT_TIMEOUT_MS, DB_POOL_RECYCLE_S, DB_POOL_MAX_OVERFLOW)
        # Waiting for the code server on close, unlike the webserver's default: a server that stops leaves no
        # process behind (the heartbeat would end it only after its TTL).
        registry = self._stack.enter_context(GrpcServerRegistry(
            instance_ref=instance.get_ref(), server_command=GrpcServerCommand.API_GRPC,
            heartbeat_ttl=WEBSERVER_GRPC_SERVER_HEARTBEAT_TTL,
            startup_timeout=instance.code_server_process_startup_timeout, wait_for_processes_on_shutdown=True))
        self._shared = instance, registry
        return self._shared


def _export_environment(paths: AmberPaths) -> None:
    """Give this process the embedded instance's environment (AMBER_HOME, DAGSTER_HOME, Amber's settings): the code
    server Dagster starts inherits this process's environment and nothing else, and must load the same instance
    and warehouse as the API, without network look-ups at import."""
    for name, value in embedded.environment(paths).items():
        if os.environ.get(name) != value:
            os.environ[name] = value
