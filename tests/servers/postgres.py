"""A PostgreSQL server of Debian's packages, in a folder of its own, on a free port of loopback.

initdb and the server refuse to run as root, so as root they run as the `postgres` user in a folder it owns
(pytest's own temporary folders are root's and closed to it); as any other user they run as that user. The
server is tuned for tests (no fsync) and stopped by its own data folder, never by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from servers.ports import free_port

BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder, or None."""
    return next((d for d in BIN_DIRS if (d / "initdb").is_file()), None)


@dataclass(frozen=True)
class PostgresServer:
    folder: Path
    port: int
    bin: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://amber@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its URL."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "amber", name)
        return self.url(name)

    def psql(self, database: str, statement: str) -> subprocess.CompletedProcess[str]:
        """Run one statement as the server's superuser (for tests that check what the database refuses)."""
        return subprocess.run([str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "amber",
                               "-d", database, "-v", "ON_ERROR_STOP=1", "-Atc", statement],
                              capture_output=True, text=True, timeout=60)

    def _run(self, *argv: str) -> None:
        subprocess.run([str(self.bin / argv[0]), *argv[1:]], check=True, capture_output=True, timeout=60)


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def running() -> Iterator[PostgresServer]:
    """Start a server (about 2 s), yield it, stop it (immediate) and remove its folder."""
    pg_bin = binaries()
    if pg_bin is None:
        raise RuntimeError("PostgreSQL is not installed: run `make setup` (it installs Debian's postgresql).")
    folder = Path(tempfile.mkdtemp(prefix="apg", dir="/tmp"))  # short: the socket path has a 108-byte limit
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    data = folder / "data"
    subprocess.run(_as_server_user([str(pg_bin / "initdb"), "-D", str(data), "-U", "amber", "-A", "trust",
                                    "-E", "UTF8", "--no-sync"]), check=True, capture_output=True, timeout=120)
    port = free_port()
    options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off -c synchronous_commit=off "
               "-c full_page_writes=off -c max_connections=300")
    try:
        subprocess.run(_as_server_user([str(pg_bin / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"),
                                        "-w", "-t", "60", "-o", options, "start"]),
                       check=True, capture_output=True, timeout=90)
        yield PostgresServer(folder, port, pg_bin)
    finally:
        subprocess.run(_as_server_user([str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


CATALOGS = ["duckdb", "postgresql"]


def use_catalog(kind: str, request, monkeypatch) -> None:  # noqa: ANN001 (pytest's FixtureRequest, MonkeyPatch)
    """Point AMBER_CATALOG_URL (inherited by subprocesses) at a new database of the session's server, or unset
    it for the DuckDB file under AMBER_HOME."""
    if kind == "postgresql":
        monkeypatch.setenv("AMBER_CATALOG_URL", request.getfixturevalue("postgres_server").create_database())
    else:
        monkeypatch.delenv("AMBER_CATALOG_URL", raising=False)
