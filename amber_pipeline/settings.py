"""Where each backend lives: one setting per backend, read here and nowhere else.

Unset, every setting is the embedded default, which is what `make demo` and `make test` use:

    AMBER_CATALOG_URL    the catalog and the Wallet's ledger: a DuckDB file (default
                         AMBER_HOME/warehouse/catalog.duckdb) or postgresql://user@host:port/db
    AMBER_STORAGE_URL    Trial rows, aggregates, Trial folders, Benchmark snapshots: a folder (default
                         AMBER_HOME) or s3://bucket/prefix, with AMBER_S3_ENDPOINT for a server of one's own
    AMBER_SANDBOX_HOSTS  a TOML file of the Docker engines that run sandboxes and their slots (default: the
                         local engine, DOCKER_HOST or its socket)
    AMBER_DAGSTER_CONFIG the dagster.yaml the embedded instance starts from (default: the repository's own;
                         deploy/ holds the variants for PostgreSQL, the Docker run launcher and Kubernetes)
    AMBER_DAGSTER_WORKSPACE the workspace.yaml the daemon and the UI load the code from (default: the
                         repository's own, in process; deploy/workspace.grpc.yaml reaches a code server)

A malformed value is refused with one sentence naming the setting, never guessed at.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from amber_pipeline.errors import AmberError
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths

CatalogKind = Literal["duckdb", "postgresql"]


def catalog_url(paths: AmberPaths) -> tuple[CatalogKind, str]:
    """Which catalog, and where: ("duckdb", a file path) or ("postgresql", a libpq URL)."""
    value = os.environ.get("AMBER_CATALOG_URL", "").strip()
    if not value:
        return "duckdb", str(paths.catalog)
    scheme = urlsplit(value).scheme
    if scheme in ("postgresql", "postgres"):
        return "postgresql", value
    if scheme in ("", "duckdb", "file"):
        path = value.split("://", 1)[1] if "://" in value else value
        return "duckdb", str(Path(path).expanduser().resolve())
    raise AmberError(f"AMBER_CATALOG_URL {value!r} is neither a DuckDB file nor postgresql://...: "
                     "set it to one of those, or unset it for the catalog under AMBER_HOME.")


def shown(url: str) -> str:
    """A URL as it may be printed: without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def storage_url() -> str | None:
    """The result store when it is not the local folder (an s3:// URL), or None for AMBER_HOME."""
    value = os.environ.get("AMBER_STORAGE_URL", "").strip()
    return value or None


def sandbox_hosts_file() -> Path | None:
    """The TOML file of sandbox engines, or None for the local engine alone."""
    value = os.environ.get("AMBER_SANDBOX_HOSTS", "").strip()
    return Path(value).expanduser() if value else None


def dagster_config() -> Path:
    """The dagster.yaml the embedded instance is made from."""
    return _repository_file("AMBER_DAGSTER_CONFIG", "dagster.yaml", "(deploy/ has the variants)")


def dagster_workspace() -> Path:
    """The workspace.yaml the daemon and the UI load Amber's code location from."""
    return _repository_file("AMBER_DAGSTER_WORKSPACE", "workspace.yaml",
                            "(deploy/workspace.grpc.yaml for a code server)")


def _repository_file(setting: str, default: str, where: str) -> Path:
    """The file a setting names, else the repository's own ``default``."""
    value = os.environ.get(setting, "").strip()
    path = Path(value).expanduser() if value else PROJECT_ROOT / default
    if not path.is_file():
        raise AmberError(f"{setting} names {path}, which is not a file: point it at a {default} {where} or unset it.")
    return path


def s3_endpoint() -> str | None:
    """The S3 server of AMBER_STORAGE_URL when it is not AWS's own (``http://127.0.0.1:9000``), or None."""
    value = os.environ.get("AMBER_S3_ENDPOINT", "").strip()
    return value or None
