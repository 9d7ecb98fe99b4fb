"""Who is acting, and in which Workspace.

The acting user comes from `--user` or the user's config file, else the login
name; the Workspace from `--workspace` or the config's default. On the
embedded default the local login user is staff, and a user with no Workspace
at all gets one named "default" on first use, so the demo and a first Job
need no setup. (Real sign-in arrives with the hosted API; locally, whoever
runs the commands owns the machine anyway.)
"""

from __future__ import annotations

import getpass
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_WORKSPACE = "default"


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
    path.write_text("".join(f'{k} = "{v}"\n' for k, v in sorted(merged.items())))


def resolve(user: str | None, workspace: str | None) -> Actor:
    config = load_config()
    return Actor(user=user or config.get("user") or local_user(), workspace=workspace or config.get("workspace"))
