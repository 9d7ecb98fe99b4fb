"""The Docker engines that run sandboxes, as the file AMBER_SANDBOX_HOSTS lists them.

Unset, there is one engine, "local": DOCKER_HOST or the local socket, with 2 slots (as many cell runs as the
embedded Dagster instance runs at once). Set, AMBER_SANDBOX_HOSTS names a TOML file of engines:

    [[engine]]
    name = "local"                      # letters, digits, '.', '_', '-': it is the Trial's `amber_engine`
    url = "unix:///var/run/docker.sock"
    slots = 2                           # how many cell runs it takes at once

    [[engine]]
    name = "box2"
    url = "tcp://10.0.0.5:2376"         # tcp:// always with mutual TLS: these three files are required
    slots = 4
    pool = "big"                        # engines of one pool share its queue (default: the engine's name)
    tls_ca = "certs/ca.pem"             # relative paths are relative to this file
    tls_cert = "certs/cert.pem"
    tls_key = "certs/key.pem"

    [[engine]]
    name = "box3"
    url = "ssh://amber@10.0.0.6:22"     # the remote runs `docker system dial-stdio`: it needs the docker CLI
    slots = 2
    ssh_key = "keys/id_ed25519"         # optional, as the known-hosts file: else ~/.ssh, as the docker CLI
    ssh_known_hosts = "keys/known_hosts"

Plain tcp:// is refused: anyone who reaches the port of an engine without TLS owns its host. Every other
mistake (an unknown key, a missing url, slots below 1, two engines of one name or one url, a file that is not
there) is refused too, with one sentence naming the file, the engine and the fix; nothing is guessed.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from amber_pipeline import settings
from amber_pipeline.errors import AmberError

LOCAL = "local"
POOL_TAG = "amber/engine_pool"  # the Dagster run tag of a cell run's pool, which the run queue holds to its slots
LOCAL_SOCKET = "unix:///var/run/docker.sock"
LOCAL_SLOTS = 2  # dagster.yaml's max_concurrent_runs: the embedded instance never runs more cell runs at once
SCHEMES = ("unix", "tcp", "ssh")
KEYS = ("name", "url", "slots", "pool", "tls_ca", "tls_cert", "tls_key", "ssh_key", "ssh_known_hosts")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")  # fits a Dagster tag value and a file name


@dataclass(frozen=True)
class TlsFiles:
    """Mutual TLS: the engine's certificate must verify against `ca`, and Amber shows it `cert` (with `key`)."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class SshLogin:
    """What an ssh:// engine's login uses beyond its URL; None fields fall back to ~/.ssh, as the docker CLI."""

    key: Path | None = None
    known_hosts: Path | None = None


@dataclass(frozen=True)
class Engine:
    name: str
    url: str
    slots: int
    pool: str
    tls: TlsFiles | None = None
    ssh: SshLogin | None = None

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme

    @property
    def local(self) -> bool:
        """Whether Amber shares the engine's host (a unix socket), which sandbox networks need: their firewall
        guard and route removal run on that host."""
        return self.scheme == "unix"


def local_url() -> str:
    """The engine a client with no engine named reaches: DOCKER_HOST, or the local socket."""
    return os.environ.get("DOCKER_HOST", LOCAL_SOCKET)


def local_engine() -> Engine:
    return Engine(LOCAL, local_url(), LOCAL_SLOTS, LOCAL)


def engines() -> list[Engine]:
    """The engines of AMBER_SANDBOX_HOSTS in the file's order, or the local engine alone when it is unset."""
    path = settings.sandbox_hosts_file()
    if path is None:
        return [local_engine()]
    return _read(path)


def named(name: str) -> Engine:
    """The engine called ``name``."""
    found = next((e for e in engines() if e.name == name), None)
    if found is None:
        path = settings.sandbox_hosts_file()
        where = f"AMBER_SANDBOX_HOSTS ({path})" if path else "The sandbox engines (AMBER_SANDBOX_HOSTS is unset)"
        raise AmberError(f"{where} list no engine named {name!r}: add it to the file or run on one it lists.")
    return found


def pools(listed: list[Engine] | None = None) -> dict[str, int]:
    """Each pool's slots: the sum of its engines' (the limit of its queue)."""
    totals: dict[str, int] = {}
    for engine in engines() if listed is None else listed:
        totals[engine.pool] = totals.get(engine.pool, 0) + engine.slots
    return totals


def _read(path: Path) -> list[Engine]:
    if not path.is_file():
        raise AmberError(f"AMBER_SANDBOX_HOSTS names {path}, which is not a file: point it at a TOML file of "
                         "[[engine]] tables, or unset it for the local engine.")
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise AmberError(f"The sandbox engines file {path} is not valid TOML ({e}): fix it.") from None
    extra = sorted(set(document) - {"engine"})
    if extra:
        raise AmberError(f"The sandbox engines file {path} has an unknown key {extra[0]!r}: it holds only "
                         "[[engine]] tables.")
    tables = document.get("engine")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise AmberError(f"The sandbox engines file {path} lists no engine: add [[engine]] tables with name, url "
                         "and slots.")
    found: list[Engine] = []
    for number, table in enumerate(tables, 1):
        engine = _engine(path, number, table)
        for other in found:
            if other.name == engine.name:
                raise AmberError(f"The sandbox engines file {path} names two engines {engine.name!r}: give each "
                                 "a name of its own.")
            if other.url == engine.url:
                raise AmberError(f"In {path}, engines {other.name!r} and {engine.name!r} have the same url "
                                 f"{engine.url}: list each engine once, with all its slots.")
        found.append(engine)
    return found


def _engine(path: Path, number: int, table: dict) -> Engine:
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise AmberError(f"Engine {number} of {path} has no valid name ({name!r}): give it name = \"...\" of up "
                         "to 63 letters, digits, '.', '_' or '-'.")
    where = f"Engine {name!r} of {path}"
    extra = sorted(set(table) - set(KEYS))
    if extra:
        raise AmberError(f"{where} has an unknown key {extra[0]!r}: the keys are {', '.join(KEYS)}.")
    url = table.get("url")
    if not isinstance(url, str) or not url.strip():
        raise AmberError(f"{where} has no url: give url = \"unix:///...\", \"tcp://host:port\" (with TLS) or "
                         "\"ssh://user@host\".")
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise AmberError(f"{where} has url {url!r}: it must start unix://, tcp:// (with TLS) or ssh://.")
    if parts.scheme == "unix" and not parts.path:
        raise AmberError(f"{where} has url {url!r} with no socket path: give unix:///path/to/docker.sock.")
    if parts.scheme in ("tcp", "ssh") and not parts.hostname:
        raise AmberError(f"{where} has url {url!r} with no host: give {parts.scheme}://host.")
    if parts.scheme == "tcp" and parts.port is None:
        raise AmberError(f"{where} has url {url!r} with no port: give tcp://host:port (2376 is Docker's TLS port).")
    slots = table.get("slots")
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise AmberError(f"{where} has slots = {slots!r}: give a whole number of at least 1 (how many cell runs "
                         "it takes at once).")
    pool = table.get("pool", name)
    if not isinstance(pool, str) or not _NAME.fullmatch(pool):
        raise AmberError(f"{where} has pool {pool!r}: give up to 63 letters, digits, '.', '_' or '-'.")
    tls_keys = [k for k in ("tls_ca", "tls_cert", "tls_key") if k in table]
    ssh_keys = [k for k in ("ssh_key", "ssh_known_hosts") if k in table]
    if tls_keys and parts.scheme != "tcp":
        raise AmberError(f"{where} has {tls_keys[0]} but url {url!r}: TLS files are for tcp:// engines; remove "
                         "them or use tcp://.")
    if ssh_keys and parts.scheme != "ssh":
        raise AmberError(f"{where} has {ssh_keys[0]} but url {url!r}: ssh files are for ssh:// engines; remove "
                         "them or use ssh://.")
    tls = None
    if parts.scheme == "tcp":
        missing = [k for k in ("tls_ca", "tls_cert", "tls_key") if k not in table]
        if missing:
            raise AmberError(f"{where} is tcp:// without {', '.join(missing)}: plain tcp is refused (anyone who "
                             "reaches the port owns the host); give tls_ca, tls_cert and tls_key.")
        tls = TlsFiles(*(_file(path, where, table, k) for k in ("tls_ca", "tls_cert", "tls_key")))
    ssh = None
    if parts.scheme == "ssh":
        ssh = SshLogin(*(_file(path, where, table, k) if k in table else None
                         for k in ("ssh_key", "ssh_known_hosts")))
    return Engine(name, url, slots, pool, tls, ssh)


def _file(path: Path, where: str, table: dict, key: str) -> Path:
    value = table[key]
    if not isinstance(value, str) or not value.strip():
        raise AmberError(f"{where} has {key} = {value!r}: give the path of a file.")
    file = (path.parent / Path(value).expanduser()).resolve()
    if not file.is_file():
        raise AmberError(f"{where} has {key} = {value!r}, and {file} is not a file: give the path of the file "
                         f"(relative to {path.parent}).")
    return file
