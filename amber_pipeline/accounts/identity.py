"""Who is acting, and in which Workspace.

The acting user comes from `--user` or the user's config file, else the login
name; the Workspace from `--workspace` or the config's default. On the
embedded default the local login user is staff, and a user with no Workspace
at all gets one named "default" on first use, so the demo and a first Job
need no setup. Behind the hosted API (`amber serve`) the user is whoever
signed in with their token instead (`amber_pipeline/auth`), and
:data:`SIGNED_IN` holds them for the request, so no rule of the embedded
default (the local login is staff) applies to it.
"""

from __future__ import annotations

import getpass
import json
import os
import tomllib
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from amber_pipeline.errors import AmberError
from amber_pipeline.user_text import quoted

DEFAULT_WORKSPACE = "default"
MAX_USER = 128  # characters of a user id
SIGNED_IN: ContextVar[str | None] = ContextVar("amber_signed_in", default=None)  # the API request's signed-in user


@dataclass(frozen=True)
class Actor:
    user: str
    workspace: str | None  # None: the config's default, else "default"


def local_user() -> str:
    return getpass.getuser()


def config_path() -> Path:
    if "AMBER_CONFIG" in os.environ:
        return Path(os.environ["AMBER_CONFIG"])
    base = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config"))
    return base / "amber" / "config.toml"


def load_config() -> dict[str, str]:
    path = config_path()
    if not path.is_file():
        return {}
    return {k: str(v) for k, v in tomllib.loads(path.read_text()).items()}


def save_config(values: dict[str, str]) -> None:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = {**load_config(), **values}
    # A JSON string is a TOML basic string: quotes, backslashes and control characters stay escaped.
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in sorted(merged.items())))


def check_user(user: str) -> str:
    """A user id, or one sentence refusing it: any printable characters (brackets too: every command prints them
    as text), no space at either end, at most MAX_USER of them, so it shows on one line as typed."""
    if not 0 < len(user) <= MAX_USER or not user.isprintable() or user != user.strip():
        raise AmberError(f"{quoted(user)} is not a user id: give up to {MAX_USER} printable characters with no "
                         "space at either end.")
    return user


def resolve(user: str | None, workspace: str | None) -> Actor:
    config = load_config()
    return Actor(user=check_user(user or config.get("user") or local_user()),
                 workspace=workspace or config.get("workspace"))
