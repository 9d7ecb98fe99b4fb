"""A cell run's access to its Model Configuration: the Provider's endpoint, the model proxy, the budget.

Both ways of running Trials (Harbor's, in sandboxes, and the static fast path)
give their Agents the same thing: a proxy address and, per Trial attempt, a
token (`open`). When the attempt ends, `close` revokes the token, keeps its
calls for the transcripts and returns what the proxy metered, and `signals`
says what the Provider did wrong, for `outcomes`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from amber_pipeline.jobs.budget import Budget
from amber_pipeline.models.configurations import ModelConfiguration
from amber_pipeline.models.endpoint import Upstream, serving
from amber_pipeline.models.proxy import Call, Grant, ModelProxy
from amber_pipeline.models.signals import ProviderSignal
from amber_pipeline.models.wire import Usage


@dataclass(frozen=True)
class TranscriptCall:
    """A model call of one Trial attempt, for the warehouse's transcripts."""

    trial_key: str
    retry: int
    call: Call


@dataclass
class CellModels:
    mc: ModelConfiguration
    upstream: Upstream
    proxy: ModelProxy
    budget: Budget
    allowed_providers: frozenset[str] | None
    calls: list[TranscriptCall] = field(default_factory=list)

    @property
    def ceiling_reached(self) -> bool:
        return self.proxy.ceiling_reached.is_set()

    def open(self, trial_key: str) -> Grant:
        """A token for one Trial attempt."""
        return self.proxy.grant(Grant(trial_key, self.mc, self.upstream.url, self.upstream.key,
                                      self.budget.of_trial(trial_key), self.allowed_providers))

    def close(self, grant: Grant, retry: int) -> Usage:
        """End the attempt: its token stops working, its calls go to the transcripts; what it used."""
        self.proxy.revoke(grant.token)
        self.calls += [TranscriptCall(grant.trial, retry, c) for c in grant.calls]
        return grant.usage

    @staticmethod
    def signals(grant: Grant | None) -> list[ProviderSignal]:
        return list(grant.signals) if grant is not None else []


@contextlib.contextmanager
def cell_models(mc: ModelConfiguration, instructions: Mapping[str, str], budget: Budget,
                allowed_providers: frozenset[str] | None, hosts: Sequence[str] = ("127.0.0.1",)
                ) -> Iterator[CellModels]:
    """The Provider's endpoint (the provider double for a replay, which matches Tasks by ``instructions``) and
    a model proxy in front of it listening on ``hosts``, for as long as the cell runs."""
    with serving(mc, instructions) as upstream, ModelProxy(hosts) as proxy:
        yield CellModels(mc, upstream, proxy, budget, allowed_providers)
