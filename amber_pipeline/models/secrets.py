"""API keys: where they come from, and the rule that they go nowhere else.

A key is read from the environment, or else from a secrets file of
``NAME=value`` lines (``AMBER_SECRETS_FILE``, default
``~/.config/amber/secrets.env``) that only its owner may read: a file others
can read is refused rather than trusted. Keys live only in the model proxy's
process, which adds them to upstream requests; they never enter a sandbox, a
log, a transcript, a report or an error message (errors name the variable,
never its value).
"""

from __future__ import annotations

import os
from pathlib import Path

from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse.files import private_text

SECRETS_FILE_ENV = "AMBER_SECRETS_FILE"


def secrets_file() -> Path:
    return Path(os.environ.get(SECRETS_FILE_ENV) or Path.home() / ".config" / "amber" / "secrets.env")


def _from_file(variable: str) -> str | None:
    text = private_text(secrets_file())
    if text is None:
        return None
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name.strip().removeprefix("export ").strip() == variable:
            return value.strip().strip("'\"") or None
    return None


def api_key(variable: str) -> str | None:
    """The key held by ``variable``: the environment first, then the secrets file."""
    return os.environ.get(variable) or _from_file(variable)


def require(variable: str, provider: str) -> str:
    """The key, or one sentence saying which variable to set."""
    key = api_key(variable)
    if not key:
        raise AmberError(f"No API key for {provider}: set {variable} in the environment or in "
                         f"{secrets_file()} (readable only by you).")
    return key
