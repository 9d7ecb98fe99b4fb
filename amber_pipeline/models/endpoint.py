"""Where a Model Configuration answers, and the one setting every model call in this process needs.

A replay Model Configuration is served by the provider double on loopback for
as long as the caller needs it; a real Provider answers at its API (or at the
``AMBER_<PROVIDER>_BASE_URL`` override) with the key from the environment or
the secrets file. Only the model proxy (and the judge's own calls) use an
`Upstream`: Agents get the proxy's address and a Trial token instead.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from amber_pipeline.models import secrets
from amber_pipeline.models.configurations import ModelConfiguration


@dataclass(frozen=True)
class Upstream:
    url: str  # base URL ending in /v1
    key: str | None

    def __repr__(self) -> str:  # never print a key, not even in a traceback
        return f"Upstream({self.url!r}, key={'set' if self.key else 'none'})"


def offline_litellm() -> None:
    """Keep Harbor and litellm off the internet (their price list, telemetry)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HARBOR_TELEMETRY", "off")


def require_key(mc: ModelConfiguration) -> str | None:
    """The configuration's API key, or one sentence naming the variable to set (None when it needs none)."""
    variable = mc.key_variable
    return secrets.require(variable, mc.provider) if variable else None


@contextlib.contextmanager
def serving(mc: ModelConfiguration, instructions: Mapping[str, str]) -> Iterator[Upstream]:
    """Where ``mc`` answers while the block runs: the provider double for a replay (which knows the Tasks by
    their Instructions), else the Provider's API with its key."""
    if mc.replay_file is None:
        yield Upstream(mc.provider_spec.url(mc.base_url), require_key(mc))
        return
    from amber_pipeline.models.provider_double import ProviderDouble, load_replay

    with ProviderDouble([load_replay(mc.replay_file)], dict(instructions)) as double:
        yield Upstream(double.base_url, None)
