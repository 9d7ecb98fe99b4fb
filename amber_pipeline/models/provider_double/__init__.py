"""Provider double: scripted model servers on loopback that speak the Providers' own wire formats.

Why it exists: Amber's tests and demo must run Agents (Harbor's Terminus-2, a "Direct Agent") and the model
proxy end to end without a real Provider, an API key or network access. This is a real HTTP server that answers
from *replay* files, scripted replies per Task. It speaks each format as the Provider's API reference describes
it, so that code that passes against the double passes against the real API.

One module per wire format, each reading its request and writing its reply whole or streamed:
``openai_chat`` (Chat Completions: OpenAI, OpenRouter, OpenAI-compatible), ``openai_responses`` (OpenAI
Responses) and ``anthropic_messages`` (Anthropic Messages). Around them: ``calls`` (the call and answer they
share, token counting), ``flavours`` (what differs by Provider: keys, errors, the model list), ``replay`` (the
replay files), ``scripts`` (which reply answers a call), ``faults`` (failure on demand) and ``server``
(routing, the HTTP server, the record of requests). ``python -m amber_pipeline.models.provider_double`` serves
from the command line (``__main__``).
"""

from amber_pipeline.models.provider_double.faults import Fault, FaultKind
from amber_pipeline.models.provider_double.replay import DONE_REPLY, Replay, load_replay
from amber_pipeline.models.provider_double.server import ProviderDouble

__all__ = ["DONE_REPLY", "Fault", "FaultKind", "ProviderDouble", "Replay", "load_replay"]
