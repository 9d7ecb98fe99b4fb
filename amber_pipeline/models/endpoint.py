"""Where a Model Configuration answers, and the one setting every model call in this process needs.

A replay Model Configuration is served by the provider double on loopback for
as long as the caller needs it; a real Provider's endpoint arrives with the
model proxy. Harbor's Agents and the model judge both call models through
litellm, which must stay off the internet (no price list, no telemetry).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from amber_pipeline.models.configurations import ModelConfiguration


def offline_litellm() -> None:
    """Keep Harbor and litellm off the internet (their price list, telemetry)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HARBOR_TELEMETRY", "off")


@contextlib.contextmanager
def serving(mc: ModelConfiguration, instructions: Mapping[str, str]) -> Iterator[str | None]:
    """The base URL that answers for ``mc`` while the block runs: the provider double for a replay
    (which knows the Tasks by their Instructions); None for a Provider's own endpoint."""
    if mc.replay_file is None:
        yield None
        return
    from amber_pipeline.models.provider_double import ProviderDouble, load_replay

    os.environ.setdefault("OPENAI_API_KEY", "replay-needs-no-key")  # litellm asks for one; the double needs none
    with ProviderDouble([load_replay(mc.replay_file)], dict(instructions)) as double:
        yield double.base_url
