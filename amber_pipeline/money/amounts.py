"""Amounts of dollars a user types: the one rule for reading them.

Python's `Decimal()` reads far more than a person means by "an amount":
`1_000`, Arabic-Indic digits, `1e3`, ` 5`, `+5`, `NaN`, `Infinity`. Money is
kept in micro-dollars, so a seventh decimal would have to be rounded, and a
user who typed `0.0000005` would be credited something they did not ask for.
So an amount is read only when it is plain: ASCII digits, optionally a point
and one to six decimals, within the stated range; anything else is refused,
never rounded or reinterpreted.
"""

from __future__ import annotations

import re
from decimal import Decimal

from amber_pipeline.errors import AmberError
from amber_pipeline.money.user_text import quoted

# Each amount a user gives (a Credit, a Job's ceiling) is at most this; the ledger holds amounts below 10**12.
MAX_AMOUNT = Decimal(1_000_000)
PLAIN = re.compile(r"[0-9]+(?:\.[0-9]{1,6})?", re.ASCII)


def parse_amount(text: str, option: str, *, maximum: Decimal = MAX_AMOUNT) -> Decimal:
    """The dollars `text` states, above zero and at most `maximum`, or one sentence naming the rule.

    `option` is how the user gave it (`--amount`), named in the sentence."""
    if PLAIN.fullmatch(text) is not None:
        value = Decimal(text)
        if 0 < value <= maximum:
            return value
    raise AmberError(f"{quoted(text)} is not an amount for {option}: give a plain amount of dollars above zero "
                     f"with at most 6 decimals, like 100 or 12.50, up to ${maximum:,}.")
