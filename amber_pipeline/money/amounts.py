"""Amounts of dollars a user types: the one rule for reading them.

Python's `Decimal()` reads far more than a person means by "an amount":
`1_000`, Arabic-Indic digits, `1e3`, ` 5`, `+5`, `NaN`, `Infinity`. Money is
kept in micro-dollars, so a seventh decimal would have to be rounded, and a
user who typed `0.0000005` would be credited something they did not ask for.
So an amount is read only when it is plain: ASCII digits, optionally a point
and one to six decimals, within the stated range; anything else is refused,
never rounded or reinterpreted.

The CLI reads its options with `parse_amount`; a request to the API carries
an amount as a JSON string of the same text (`Amount`, `Ceiling`), held to
the same rule and refused in the same sentence. A JSON number is refused: it
arrives as a float, where `1e1` and `10` are one value and `0.1` is not 0.1.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Annotated

from pydantic import PlainValidator, WithJsonSchema

from amber_pipeline.errors import AmberError
from amber_pipeline.user_text import clipped, quoted

# Each amount a user gives (a Credit, a Job's ceiling) is at most this; the ledger holds amounts below 10**12.
MAX_AMOUNT = Decimal(1_000_000)
PLAIN = re.compile(r"[0-9]+(?:\.[0-9]{1,6})?", re.ASCII)


def parse_amount(text: object, option: str, *, maximum: Decimal = MAX_AMOUNT) -> Decimal:
    """The dollars `text` states, above zero and at most `maximum`, or one sentence naming the rule.

    `option` is how the user gave it (`--amount`), named in the sentence. Anything but a string (a JSON number
    sent to the API) is refused, shown as it was sent."""
    if isinstance(text, str) and PLAIN.fullmatch(text) is not None:
        value = Decimal(text)
        if 0 < value <= maximum:
            return value
    shown = quoted(text) if isinstance(text, str) else f"{clipped(json.dumps(text, default=str))} (not a string)"
    raise AmberError(f"{shown} is not an amount for {option}: give a plain amount of dollars above zero "
                     f"with at most 6 decimals, like 100 or 12.50, up to ${maximum:,}.")


def _as_typed(option: str) -> PlainValidator:
    """A validator keeping an amount as the text it was sent, once `parse_amount` has read it."""

    def checked(value: object) -> str:
        parse_amount(value, option)  # which refuses anything but a string
        return str(value)

    return PlainValidator(checked, json_schema_input_type=str)


_SCHEMA = WithJsonSchema({"type": "string", "pattern": f"^{PLAIN.pattern}$", "examples": ["100", "12.50"]})
# An amount in a request, as the text the user typed; its refusal names the CLI's option, as the CLI's does.
Amount = Annotated[str, _as_typed("--amount"), _SCHEMA]
Ceiling = Annotated[str, _as_typed("--ceiling"), _SCHEMA]
AtMost = Annotated[str, _as_typed("at_most"), _SCHEMA]  # set by pages from a preview, never typed at the CLI


def as_text(amount: float | str) -> str:
    """An amount as the plain text `parse_amount` reads: a float (a run config's) written out in full."""
    return amount if isinstance(amount, str) else f"{Decimal(repr(amount)):f}"
