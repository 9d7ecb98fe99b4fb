"""Failure on demand: ``ProviderDouble.inject(Fault(...))`` from any thread makes the next calls fail the way
Providers fail (429 with ``retry-after``, 500, overloaded, slow, a stream cut mid-way, another upstream than the
pinned one), so that retries, fallbacks and their accounting can be tested without waiting for a real outage.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal, get_args

from amber_pipeline.models.provider_double.calls import Call, ProviderError
from amber_pipeline.models.provider_double.openai_chat import pinned_upstream

FaultKind = Literal["rate_limit", "server_error", "overloaded", "slow", "cut_stream", "other_provider"]
REFUSALS: tuple[FaultKind, ...] = ("rate_limit", "server_error", "overloaded")  # the kinds that send no reply


@dataclass(frozen=True)
class Fault:
    """A failure the double plays on its next matching calls; give it to ``ProviderDouble.inject``.

    kind:
        ``rate_limit``: 429 with a ``retry-after: <retry_after>`` header and the Provider's
        rate-limit error body. ``server_error``: 500. ``overloaded``: 529 ``overloaded_error`` on
        the Anthropic route, 503 on the OpenAI and OpenRouter routes. These three send no reply:
        the call is not counted as served and does not use up a scripted alternative.
        ``slow``: the normal reply, but nothing is sent for ``delay_sec`` seconds first.
        ``cut_stream``: a stream sends its first ``after_events`` events, then the connection is
        closed without the final events (and without ending the chunked body); a non-streamed
        reply sends half its body, then closes.
        ``other_provider``: a chat reply says (top-level ``provider``) that ``served_by`` served it,
        not the pinned upstream: an OpenRouter fallback, or a pin not kept.
    count: how many of the following matching calls it hits (default 1).
    model: hit only calls for this model (as requested, or the replay model's name); None: any.

    Faults wait in the order injected; each call takes the first one that matches it.
    """

    kind: FaultKind
    count: int = 1
    model: str | None = None
    delay_sec: float = 1.0
    retry_after: int = 1
    after_events: int = 2
    served_by: str = "other-provider"

    def __post_init__(self) -> None:
        if self.kind not in get_args(FaultKind):
            raise ValueError(f"Unknown fault kind {self.kind!r}: one of {', '.join(get_args(FaultKind))}")
        if self.count < 1:
            raise ValueError("A fault's count must be at least 1")


@dataclass
class _Waiting:
    fault: Fault
    left: int  # calls it still hits


class Faults:
    """The injected faults that have calls left to hit, in the order injected (thread-safe)."""

    def __init__(self) -> None:
        self._waiting: list[_Waiting] = []
        self._lock = threading.Lock()

    def inject(self, fault: Fault) -> None:
        with self._lock:
            self._waiting.append(_Waiting(fault, fault.count))

    def clear(self) -> None:
        with self._lock:
            self._waiting.clear()

    def take(self, call: Call) -> Fault | None:
        """The first fault that matches this call, used up by it once."""
        with self._lock:
            for waiting in self._waiting:
                fault = waiting.fault
                if fault.model is None or fault.model in (call.requested, call.replay.model):
                    waiting.left -= 1
                    if waiting.left <= 0:
                        self._waiting.remove(waiting)
                    return fault
        return None


def refusal(fault: Fault, call: Call) -> ProviderError:
    """The error a refusing fault (``REFUSALS``) answers with, in the words of the call's Provider."""
    anthropic = call.flavour == "anthropic"
    if fault.kind == "rate_limit":
        message = (
            "This request would exceed the rate limit for your organization. Please try again later."
            if anthropic
            else f"Rate limit reached for {call.requested}. Please try again in {fault.retry_after}s."
        )
        e = ProviderError(429, message, "rate_limit", None if anthropic else "rate_limit_exceeded",
                          headers={"retry-after": str(fault.retry_after)})
    elif fault.kind == "server_error":
        message = "Internal server error" if anthropic else (
            "The server had an error while processing your request. Sorry about that!"
        )
        e = ProviderError(500, message, "server")
    elif anthropic:
        e = ProviderError(529, "Overloaded", "overloaded")
    else:
        e = ProviderError(503, "That model is currently overloaded with other requests. Please retry.", "overloaded")
    if call.flavour == "openrouter":
        e.upstream = pinned_upstream(call.body, ("order",))
    return e
