"""A cell run's budget: what is left of its Job's pool, which the model proxy weighs every call against.

The Job's reservations are one pool, its spending ceiling (`money.wallet`).
The ledger enforces it when a Trial is charged, which is too late for model
calls: a runaway Agent could spend far past it inside one Trial. So each cell
run keeps a view of the pool (`Pool`): what the ledger has left of it, read
again after each charge of this run and every second or so (so other cells'
charges, and a `job continue` that adds to it, are seen), less what this
run's calls spent on Trials not charged yet. A cell that runs over its
estimate therefore uses what the other cells did not need, and the Job stops
only when the whole pool is spent.

Before a call the proxy holds its expected cost (`Budget`): the mean cost of
the cell's calls so far, or before there is one, the call's input as if none
of it were cached (the body's size is all that is known upfront, and pricing
it all as uncached input would overstate a conversation's later calls, whose
input the Provider mostly serves from its cache). A call whose hold does not
fit in what is left is refused. After the call the hold gives way to what it
really cost. What still slips past (calls of other cells in flight, the first
calls' output before any mean is known) is stopped by the ledger, which never
charges past the pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from amber_pipeline.models.configurations import ModelConfiguration
from amber_pipeline.models.wire import Usage
from amber_pipeline.money.prices import Prices


class Pool:
    """A cell run's view of its Job's pool; thread-safe (the proxy's thread asks, the run's threads tell)."""

    def __init__(self, read: Callable[[], Decimal]):
        self._read = read  # what the ledger has left of the Job's reservations now
        self._lock = threading.Lock()
        self._ledger_left = read()
        self._unsettled: dict[str, Decimal] = {}  # Trial attempt -> what its calls spent, until it is charged
        self._settles = 0

    def left(self) -> Decimal:
        with self._lock:
            return self._ledger_left - sum(self._unsettled.values(), Decimal(0))

    def spend(self, trial: str, cost: Decimal) -> None:
        with self._lock:
            self._unsettled[trial] = self._unsettled.get(trial, Decimal(0)) + cost

    def settled(self, trials: Iterable[str]) -> None:
        """These Trials ended and those that scored were charged: the ledger now holds what they cost."""
        left = self._read()  # after their charges: what they spent is in it
        with self._lock:
            for trial in trials:
                self._unsettled.pop(trial, None)
            self._ledger_left = left
            self._settles += 1

    def refresh(self) -> None:
        """Read the ledger again (other cells' charges, a continuation's reservation)."""
        with self._lock:
            settles = self._settles
        left = self._read()
        with self._lock:
            if settles == self._settles:  # a read older than a settlement would count its Trials twice or not at all
                self._ledger_left = left


@dataclass
class Budget:
    """Implements the proxy's `Spending` for the calls of one cell run: called from the proxy's thread, so it
    keeps a lock."""

    pool: Pool | None  # None: no ceiling known (the ledger's alone)
    prices: Prices
    mc: ModelConfiguration
    spent: Decimal = Decimal(0)
    held: Decimal = Decimal(0)
    _calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def of_trial(self, trial: str) -> TrialSpending:
        """The `Spending` of one Trial attempt's calls: what they cost stays unsettled until it is charged."""
        return TrialSpending(self, trial)

    def hold(self, upfront: Usage) -> Decimal | None:
        """Hold the call's expected cost, or None when it does not fit."""
        with self._lock:
            expected = self.spent / self._calls if self._calls else self.prices.model_cost(self.mc, upfront)
            if self.pool is not None and self.held + expected > self.pool.left():
                return None
            self.held += expected
            return expected

    def settle(self, hold: object, used: Usage, trial: str) -> None:
        assert isinstance(hold, Decimal)
        cost = self.prices.model_cost(self.mc, used)
        with self._lock:
            self.held -= hold
            self.spent += cost
            self._calls += 1
            if self.pool is not None:
                self.pool.spend(trial, cost)


@dataclass(frozen=True)
class TrialSpending:
    budget: Budget
    trial: str

    def hold(self, upfront: Usage) -> Decimal | None:
        return self.budget.hold(upfront)

    def settle(self, hold: object, used: Usage) -> None:
        self.budget.settle(hold, used, self.trial)
