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

    def model_cost(self, mc: ModelConfiguration, input_tokens: int, output_tokens: int) -> Decimal:
        return usd((input_tokens * mc.input_usd_per_mtok + output_tokens * mc.output_usd_per_mtok) / 1e6)

    def sandbox_cost(self, seconds: float) -> Decimal:
        return usd(Decimal(str(seconds)) / 3600 * self.sandbox_usd_per_hour)

    def trial_cost(self, mc: ModelConfiguration | None, input_tokens: int, output_tokens: int,
                   seconds: float) -> Decimal:
        """What one Trial is charged: its tokens at its Model Configuration's prices plus its sandbox time."""
        model = self.model_cost(mc, input_tokens, output_tokens) if mc is not None else Decimal(0)
        return model + self.sandbox_cost(seconds)


PRICES = Prices()
