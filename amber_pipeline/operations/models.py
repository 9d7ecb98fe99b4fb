"""Model Configurations: the ones a Workspace can compare, and its own."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from amber_pipeline.accounts.identity import SIGNED_IN
from amber_pipeline.errors import AmberError
from amber_pipeline.models import configurations
from amber_pipeline.models.configurations import ModelConfiguration
from amber_pipeline.operations.operation import Acting, operation
from amber_pipeline.paths import PROJECT_ROOT


class Shown(BaseModel):
    """A Model Configuration with its reference (name@id) and id, which are computed from its content."""

    ref: str
    id: str
    key_variable: str | None
    configuration: ModelConfiguration


class ModelRef(BaseModel):
    name: str = Field(description="A Model Configuration's name or name@id.")


class ModelFile(BaseModel):
    toml: str = Field(description="The TOML text: name, model, provider, [prices] (input, cached_input, output, "
                                  "source) and [settings].")
    source: str = Field("the request", description="Where the text comes from, for error messages (a file name).")


class Added(BaseModel):
    shown: Shown
    new: bool  # False: the same configuration was there already
    workspace: str


class Known(BaseModel):
    workspace: str
    models: list[Shown]


def _shown(mc: ModelConfiguration) -> Shown:
    return Shown(ref=mc.ref, id=mc.id, key_variable=mc.key_variable, configuration=mc)


@operation("GET", "/models")
def model_list(acting: Acting) -> Known:
    """The Model Configurations the Workspace can use: its own, Amber's catalog, and the replays."""
    known = configurations.known_model_configurations(acting.wh.paths, acting.workspace)
    return Known(workspace=acting.workspace, models=[_shown(mc) for mc in known.values()])


@operation("GET", "/models/{name}")
def model_show(acting: Acting, params: ModelRef) -> Shown:
    """One Model Configuration in full."""
    return _shown(configurations.model_configuration(params.name, acting.wh.paths, acting.workspace))


@operation("POST", "/models")
def model_add(acting: Acting, params: ModelFile) -> Added:
    """Add a Model Configuration of your own to the Workspace."""
    given = configurations.read_toml(params.toml, params.source)
    if SIGNED_IN.get() is not None:
        _held_to_the_server(acting, given)
    mc, new = configurations.add(acting.wh.paths, acting.workspace, given)
    return Added(shown=_shown(mc), new=new, workspace=acting.workspace)


def _held_to_the_server(acting: Acting, mc: ModelConfiguration) -> None:
    """What a signed-in user's configuration may not ask of the server, whose files, environment and network are
    not theirs: a replay script of its own (a file it names), the value of one of its environment variables as a
    key (sent to an endpoint the user chose), or an endpoint on the server's own network."""
    replay = mc.replay_file
    if replay is not None and (not replay.resolve().is_relative_to(PROJECT_ROOT) or acting.wh.paths.holds(replay)):
        raise AmberError(f"replay {mc.replay!r} is a file outside Amber's own: through the API a replay names one of "
                         "Amber's scripts (examples/replays).")
    if mc.key_env is not None:
        raise AmberError(f"key_env {mc.key_env!r} would send a variable of the server's to your endpoint: through "
                         "the API drop key_env (Amber staff set keys on the server's host).")
    if mc.base_url is not None and not _public_https(mc.base_url):
        raise AmberError(f"base_url {mc.base_url!r} is not an https URL of a public host: through the API an "
                         "endpoint is reached over https on the internet, never on the server's own network.")


def _public_https(url: str) -> bool:
    """An https URL whose host is a name (not localhost) or a public address: the checks that need no look-up."""
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".").lower()
    if parts.scheme != "https" or not host or host == "localhost" or host.endswith((".localhost", ".local",
                                                                                    ".internal")):
        return False
    try:
        return ipaddress.ip_address(host).is_global
    except ValueError:
        return "." in host  # a name with a domain; a bare one ("db") resolves on the server's network
