"""Money as exact decimals, and what a Trial costs.

Amounts are decimals of micro-dollars end to end (the ledger stores
DECIMAL(18, 6)), so a balance is an exact sum. A Trial costs its metered model
tokens at its Model Configuration's prices plus its sandbox time at the
sandbox price; the Quote's estimates use the same prices, so a price change
reaches both at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from amber_pipeline.models.configurations import ModelConfiguration
from amber_pipeline.models.wire import Usage

CENT = Decimal("0.01")
MICRO = Decimal("0.000001")


def usd(amount: float | Decimal | str) -> Decimal:
    """Money as an exact decimal of micro-dollars."""
    return Decimal(str(amount)).quantize(MICRO, rounding=ROUND_HALF_UP)


def show(amount: Decimal) -> str:
    """Dollars with cents, or with micro-dollars when the amount has them."""
    return f"${amount:,.2f}" if amount == amount.quantize(CENT) else f"${amount:,.6f}"


@dataclass(frozen=True)
class Prices:
    """The price list of this Amber: what one sandbox-hour costs (model prices live on Model Configurations)."""

    sandbox_usd_per_hour: Decimal = Decimal("0.05")  # the embedded default's price of one sandbox-hour

    @staticmethod
    def model_cost(mc: ModelConfiguration, usage: Usage) -> Decimal:
        """Uncached input at the input price, cached input at the cached price, output at the output price."""
        p, cached = mc.prices, min(usage.cached_input_tokens, usage.input_tokens)
        per_mtok = (Decimal(str(p.input)) * (usage.input_tokens - cached) + Decimal(str(p.cached_input)) * cached
                    + Decimal(str(p.output)) * usage.output_tokens)
        return usd(per_mtok / 1_000_000)

    def sandbox_cost(self, seconds: float) -> Decimal:
        return usd(Decimal(str(seconds)) / 3600 * self.sandbox_usd_per_hour)

    def trial_cost(self, mc: ModelConfiguration | None, usage: Usage, seconds: float) -> Decimal:
        """What one Trial is charged: its metered tokens at its Model Configuration's prices plus its sandbox
        time."""
        model = self.model_cost(mc, usage) if mc is not None else Decimal(0)
        return model + self.sandbox_cost(seconds)


PRICES = Prices()
