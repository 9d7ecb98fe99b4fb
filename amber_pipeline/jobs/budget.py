"""A cell's budget: its share of the Job's Quote, which the model proxy weighs every call against.

The Quote is the Job's spending ceiling. The ledger enforces it when a Trial
is charged, which is too late for model calls: a runaway Agent could spend far
past it inside one Trial. So each cell run gives the proxy its share of the
Quote. Before a call the proxy holds its expected cost: the mean cost of the
cell's calls so far, or before there is one, the call's input as if none of
it were cached (the body's size is all that is known upfront, and pricing it
all as uncached input would overstate a conversation's later calls, whose
input the Provider mostly serves from its cache). A call whose hold does not
fit beside what was spent and what calls in flight hold is refused. After the
call the hold gives way to what it really cost. The cell's share,
not the Job's remainder, because cells run in separate processes and each
must decide alone. What still slips past (the first calls' output, before
any mean is known) is stopped by the ledger, which never charges past the
Quote.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from decimal import Decimal

from amber_pipeline.models.configurations import ModelConfiguration
from amber_pipeline.models.wire import Usage
from amber_pipeline.money.prices import Prices


@dataclass
class Budget:
    """Implements the proxy's `Spending`: called from the proxy's thread, so it keeps a lock."""

    limit: Decimal | None  # None: no share known (the ledger's ceiling alone)
    prices: Prices
    mc: ModelConfiguration
    spent: Decimal = Decimal(0)
    held: Decimal = Decimal(0)
    _calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def hold(self, upfront: Usage) -> Decimal | None:
        """Hold the call's expected cost, or None when it does not fit."""
        with self._lock:
            expected = self.spent / self._calls if self._calls else self.prices.model_cost(self.mc, upfront)
            if self.limit is not None and self.spent + self.held + expected > self.limit:
                return None
            self.held += expected
            return expected

    def settle(self, hold: object, used: Usage) -> None:
        assert isinstance(hold, Decimal)
        cost = self.prices.model_cost(self.mc, used)
        with self._lock:
            self.held -= hold
            self.spent += cost
            self._calls += 1
