#!/usr/bin/env python3
"""MRCR's check: the answer must start with the random prefix and then match the expected text closely.

This is the grader OpenAI publishes with the dataset (huggingface.co/datasets/openai/mrcr):
an answer that does not start with `random_string_to_prepend` scores 0;
otherwise the prefix is removed from the answer and from the expected answer
and the score is `difflib.SequenceMatcher(None, answer, expected).ratio()`.
The Task is passed at a score of `THRESHOLD` (0.9) or more. As in the
official grader, nothing is stripped first: a leading space or newline before
the prefix fails. The item comes from `mrcr.json` beside this file, the answer
on standard input.
"""

from __future__ import annotations

import json
import sys
from difflib import SequenceMatcher
from pathlib import Path

THRESHOLD = 0.9


def score(answer: str, expected: str, prefix: str) -> float:
    """The official MRCR grade of an answer: 0 without the prefix, else the similarity after it."""
    if not answer.startswith(prefix):
        return 0.0
    return SequenceMatcher(None, answer.removeprefix(prefix), expected.removeprefix(prefix)).ratio()


def main() -> None:
    item = json.loads(Path(__file__).resolve().with_name("mrcr.json").read_text(encoding="utf-8"))
    answer, prefix = sys.stdin.read(), item["random_string_to_prepend"]
    if not answer.startswith(prefix):
        sys.exit(f'The answer does not start with the requested prefix "{prefix}".')
    similarity = score(answer, item["answer"], prefix)
    if similarity < THRESHOLD:
        sys.exit(f"The answer matches the expected text at {similarity:.1%} similarity, below {THRESHOLD:.0%}.")


if __name__ == "__main__":
    main()
