"""Model Configurations: a Model with its pinned Provider and its call settings.

For now Amber ships only "replay" Model Configurations: scripted replies served
by the provider double (`provider_double.py`, reached through `endpoint.py`) on loopback, labelled as such
everywhere they appear, so the demo and the tests need no API key and no
internet. Real Providers arrive with the model proxy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from amber_pipeline.errors import AmberError
from amber_pipeline.paths import PROJECT_ROOT

REPLAY_DIR = PROJECT_ROOT / "examples" / "replays"
REPLAY_PROVIDER = "replay (Amber's local provider double, not a real model)"


@dataclass(frozen=True)
class ModelConfiguration:
    name: str
    model: str
    provider: str
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    settings: dict[str, float | str] = field(default_factory=dict)
    replay_file: Path | None = None


# Replay prices are set to look like a frontier and a small model, so the
# demo's cost column has the shape a real comparison has.
_REPLAY_PRICES = {"replay-strong": (3.0, 15.0), "replay-weak": (0.25, 1.25), "judge-replay": (0.25, 1.25)}


def _replay_configurations() -> dict[str, ModelConfiguration]:
    found = {}
    for path in sorted(REPLAY_DIR.glob("*.json")):
        model = json.loads(path.read_text())["model"]
        price_in, price_out = _REPLAY_PRICES.get(model, (1.0, 5.0))
        found[model] = ModelConfiguration(
            name=model, model=model, provider=REPLAY_PROVIDER,
            input_usd_per_mtok=price_in, output_usd_per_mtok=price_out,
            settings={"temperature": 0.0}, replay_file=path)
    return found


def known_model_configurations() -> dict[str, ModelConfiguration]:
    return _replay_configurations()


def model_configuration(name: str) -> ModelConfiguration:
    configurations = known_model_configurations()
    if name not in configurations:
        names = ", ".join(sorted(configurations)) or "none"
        raise AmberError(f"Unknown Model Configuration {name!r}: choose one of {names}.")
    return configurations[name]
