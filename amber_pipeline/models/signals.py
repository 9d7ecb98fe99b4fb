"""Provider signals: what the model proxy saw go wrong with a Trial's model calls.

The proxy raises them; `jobs.outcomes` decides what each means for the Trial
(Errored and retried, or cancelled at the ceiling). One enum, so the two can
never name a signal differently.
"""

from __future__ import annotations

from enum import StrEnum


class ProviderSignal(StrEnum):
    UPSTREAM_RATE_LIMIT = "upstream_429"
    UPSTREAM_SERVER_ERROR = "upstream_5xx"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    UPSTREAM_DROPPED = "upstream_dropped"  # a dropped connection or a stream cut before its end
    PROVIDER_MISMATCH = "provider_mismatch"  # served by another Provider than the pinned one
    CEILING = "ceiling_reached"  # the proxy refused a call that would pass the cell's share of the Quote
