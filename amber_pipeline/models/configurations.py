"""Model Configurations: a Model with its pinned Provider, its call settings and its prices.

A Model Configuration is what a user compares and chooses between, so its id
is a content hash of everything in it (name, Model, Provider, the OpenRouter
upstream and quantization, settings, prices): any change makes a new
configuration, and cells are keyed by ``name@id`` so Rewards of different
configurations are never pooled.

Three sources, searched in this order:
- the Workspace's own configurations, added with ``amber model add FILE.toml``
  and kept as files under ``AMBER_HOME/models/<workspace>/``;
- Amber's catalog (``catalog.toml`` beside this module): current Anthropic,
  OpenAI and OpenRouter configurations at their published prices, each with
  the page its prices come from;
- replay configurations: scripted replies served by the provider double on
  loopback (``examples/replays``), labelled as such everywhere they appear,
  so the demo and the tests need no key and no internet.

A name resolves to one configuration; a Workspace cannot give one of its own
the name of another with different content (it would make results ambiguous).
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.models.providers import PROVIDERS, Provider
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths

CATALOG = Path(__file__).with_name("catalog.toml")
REPLAY_DIR = PROJECT_ROOT / "examples" / "replays"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
QUANTIZATIONS = ("int4", "int8", "fp4", "fp6", "fp8", "fp16", "bf16", "fp32", "unknown")  # OpenRouter's values


class Settings(BaseModel):
    """How every call of the configuration is made; the model proxy applies them to each request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    max_output_tokens: int | None = Field(None, gt=0)


class Prices(BaseModel):
    """US dollars per million tokens, and where the figures come from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    cached_input: float = Field(ge=0)
    output: float = Field(ge=0)
    source: str = Field(min_length=1, description="The page the prices were read from, and when.")


class ModelConfiguration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    model: str = Field(min_length=1, description="The Provider's id of the Model.")
    provider: str
    prices: Prices
    settings: Settings = Settings()
    description: str = ""
    base_url: str | None = Field(None, description="OpenAI-compatible endpoints only: where they answer.")
    key_env: str | None = Field(None, description="OpenAI-compatible endpoints only: the variable with the key.")
    upstream: str | None = Field(None, description="OpenRouter only: the pinned upstream Provider.")
    quantization: str | None = Field(None, description="OpenRouter only: the pinned quantization.")
    replay: str | None = Field(None, description="Replay only: the replay file in examples/replays.")

    @model_validator(mode="after")
    def _pinned(self) -> ModelConfiguration:
        if not NAME.fullmatch(self.name):
            raise ValueError("name must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}")
        openrouter, compatible = self.provider == "openrouter", self.provider == "openai-compatible"
        if openrouter and not (self.upstream and self.quantization):
            raise ValueError("an OpenRouter configuration pins its upstream Provider and quantization: "
                             "set upstream and quantization")
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)}")
        if not openrouter and (self.upstream or self.quantization):
            raise ValueError("upstream and quantization are for OpenRouter configurations only")
        if compatible != (self.base_url is not None):
            raise ValueError("base_url is required for, and only for, provider openai-compatible")
        if self.key_env is not None and not compatible:
            raise ValueError(f"key_env is for openai-compatible endpoints; {self.provider} keys come from "
                             f"{PROVIDERS[self.provider].key_env}")
        if self.provider == "anthropic" and self.settings.reasoning_effort is not None:
            raise ValueError("reasoning_effort is for OpenAI-style endpoints; Anthropic configurations take "
                             "max_output_tokens and temperature")
        if (self.provider == "replay") != (self.replay is not None):
            raise ValueError("replay is required for, and only for, provider replay")
        return self

    @property
    def id(self) -> str:
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def ref(self) -> str:
        """How cells and reports name it: the name, and the id that makes it exact."""
        return f"{self.name}@{self.id[:8]}"

    @property
    def provider_spec(self) -> Provider:
        return PROVIDERS[self.provider]

    @property
    def key_variable(self) -> str | None:
        """The environment variable (or secrets-file entry) that holds this configuration's key."""
        return self.key_env if self.provider == "openai-compatible" else self.provider_spec.key_env

    @property
    def served_by(self) -> str:
        """The Provider that must serve every call: for OpenRouter the pinned upstream, for an OpenAI-compatible
        endpoint its host. A Workspace's Provider policy names these."""
        if self.base_url is not None:
            return urlsplit(self.base_url).netloc or self.base_url
        return self.upstream or self.provider

    @property
    def is_replay(self) -> bool:
        return self.provider == "replay"

    @property
    def replay_file(self) -> Path | None:
        return REPLAY_DIR / self.replay if self.replay else None

    def to_toml(self) -> str:
        """The configuration as a TOML file `amber model add` reads back to the same id."""
        return _toml(self.model_dump(mode="json", exclude_none=True))


def _toml(data: dict, table: str = "") -> str:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    lines = [f"[{table}]"] if table and scalars else []
    lines += [f"{k} = {json.dumps(v)}" for k, v in scalars.items()]
    text = "\n".join(lines) + ("\n" if lines else "")
    for k, v in data.items():
        if isinstance(v, dict) and v:
            text += "\n" + _toml(v, f"{table}.{k}" if table else k)
    return text


def parse(data: dict, where: str) -> ModelConfiguration:
    """A configuration from its TOML table, or one sentence saying what is wrong with it."""
    try:
        return ModelConfiguration.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        problem = first["msg"].removeprefix("Value error, ")
        at = f" at {field}" if field else ""
        raise AmberError(f"{where}{at}: {problem}; fix the file and add it again.") from None


def file_text(path: Path) -> str:
    """The text of a Model Configuration's TOML file (the form `amber model show` prints)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        raise AmberError(f"No file at {path}: give the path of a Model Configuration TOML file.") from None
    except UnicodeDecodeError as e:
        raise AmberError(f"{path} is not valid TOML ({e}): fix the file and add it again.") from None


def read_toml(text: str, where: str) -> ModelConfiguration:
    """One Model Configuration from the TOML text of the file `where` names."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise AmberError(f"{where} is not valid TOML ({e}): fix the file and add it again.") from None
    return parse(data, where)


def read_file(path: Path) -> ModelConfiguration:
    return read_toml(file_text(path), str(path))


@cache
def catalog() -> tuple[ModelConfiguration, ...]:
    """Amber's catalog of real Providers' configurations, then the replay ones."""
    tables = tomllib.loads(CATALOG.read_text())["configuration"]
    found = [parse(t, f"{CATALOG.name} ({t.get('name')})") for t in tables]
    return tuple(found) + _replay_configurations()


# Replay prices are set to look like a frontier and a small model, so the demo's cost column has the shape a
# real comparison has.
_REPLAY_PRICES = {"replay-strong": (3.0, 0.3, 15.0), "replay-weak": (0.25, 0.025, 1.25),
                  "judge-replay": (0.25, 0.025, 1.25)}


def _replay_configurations() -> tuple[ModelConfiguration, ...]:
    found = []
    for path in sorted(REPLAY_DIR.glob("*.json")):
        model = json.loads(path.read_text())["model"]
        price_in, price_cached, price_out = _REPLAY_PRICES.get(model, (1.0, 0.1, 5.0))
        prices = Prices(input=price_in, cached_input=price_cached, output=price_out,
                        source="made up for the demo: a replay is a script, not a model")
        found.append(ModelConfiguration(
            name=model, model=model, provider="replay", prices=prices, settings=Settings(temperature=0.0),
            description="replay: Amber's provider double answering from a script, not a real model",
            replay=path.name))
    return tuple(found)


def _own_dir(paths: AmberPaths, workspace: str) -> Path:
    return paths.models / workspace


def own(paths: AmberPaths, workspace: str) -> list[ModelConfiguration]:
    """The Workspace's own configurations, oldest first."""
    folder = _own_dir(paths, workspace)
    files = sorted(folder.glob("*.toml"), key=lambda p: (p.stat().st_mtime_ns, p.name)) if folder.is_dir() else []
    return [read_file(p) for p in files]


def known_model_configurations(paths: AmberPaths | None = None,
                               workspace: str | None = None) -> dict[str, ModelConfiguration]:
    """Every configuration a Workspace can use, by name (its own ones first)."""
    found: dict[str, ModelConfiguration] = {}
    mine = own(paths, workspace) if paths is not None and workspace is not None else []
    for mc in (*mine, *catalog()):
        found.setdefault(mc.name, mc)
    return found


def model_configuration(ref: str, paths: AmberPaths | None = None,
                        workspace: str | None = None) -> ModelConfiguration:
    """A configuration by name, by ``name@id`` (id prefix of at least 8), or one sentence naming the known ones."""
    known = known_model_configurations(paths, workspace)
    name, _, id_prefix = ref.partition("@")
    mc = known.get(name)
    if mc is not None and (not id_prefix or (len(id_prefix) >= 8 and mc.id.startswith(id_prefix))):
        return mc
    if mc is not None:
        raise AmberError(f"Model Configuration {name!r} is now {mc.ref}, not {ref}: its content changed, "
                         f"so results under {ref} are kept apart; name {mc.ref} to use the current one.")
    names = ", ".join(sorted(known)) or "none"
    raise NotFound(f"Unknown Model Configuration {ref!r}: choose one of {names}, "
                   "or add your own with `amber model add FILE.toml`.")


def add(paths: AmberPaths, workspace: str, mc: ModelConfiguration) -> tuple[ModelConfiguration, bool]:
    """Keep a Workspace's own configuration; (it, whether it is new). The same content again is a no-op."""
    existing = known_model_configurations(paths, workspace).get(mc.name)
    if existing is not None:
        if existing.id == mc.id:
            return existing, False
        raise AmberError(f"A Model Configuration named {mc.name!r} already exists ({existing.ref}) with other "
                         "content: give the new one another name.")
    folder = _own_dir(paths, workspace)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{mc.name}.toml"
    scratch = target.with_suffix(".toml.part")
    scratch.write_text(mc.to_toml())
    scratch.replace(target)
    return mc, True
