#!/usr/bin/env python3
"""LongMemEval's check: the answer must hold every word and number of the expected answer.

The expected answer comes from `longmemeval.json` beside this file, the
answer on standard input. Both are read the same way (`words`): letters
case-folded, apostrophes dropped ("don't" is "dont"), commas inside numbers
dropped ("1,200" is "1200"), and every other character that is not a letter or
a digit a space, so punctuation never matters. Words are compared whole: the
expected "2" is not found in "2023", nor "cat" in "concatenate" (which is why
this is a program and not the Verifier's `contains`, a substring test). A
number from zero to twenty also matches its English word ("3" and "three").
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty")
_SAME = {**{str(i): w for i, w in enumerate(NUMBER_WORDS)}, **{w: str(i) for i, w in enumerate(NUMBER_WORDS)}}
_GROUPED = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_APOSTROPHES = re.compile(r"['\u2019\u02bc]")
_OTHER = re.compile(r"[\W_]+")


def words(text: str) -> list[str]:
    """The text's words and numbers, normalised, in order, without repeats."""
    text = _APOSTROPHES.sub("", _GROUPED.sub("", text.casefold()))
    return list(dict.fromkeys(_OTHER.sub(" ", text).split()))


def missing(expected: str, answer: str) -> list[str]:
    """The expected answer's words the answer does not hold."""
    given = set(words(answer))
    return [w for w in words(expected) if w not in given and _SAME.get(w) not in given]


def main() -> None:
    item = json.loads(Path(__file__).resolve().with_name("longmemeval.json").read_text(encoding="utf-8"))
    lacking = missing(item["answer"], sys.stdin.read())
    if lacking:
        shown = ", ".join(f'"{w}"' for w in lacking[:5]) + (f" and {len(lacking) - 5} more" if len(lacking) > 5
                                                            else "")
        sys.exit(f"The answer lacks {shown} of the expected answer.")


if __name__ == "__main__":
    main()
