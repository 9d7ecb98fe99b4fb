"""LongMemEval (Wu et al. 2025, github.com/xiaowu0162/LongMemEval) as static Tasks.

The published file is one JSON list (`longmemeval_s.json`, `_m`, `_oracle`)
of items with `question_id`, `question_type`, `question`, `answer`,
`question_date` and the chat history: `haystack_sessions` (each a list of
`{"role", "content"}` turns), with `haystack_dates` and `haystack_session_ids`
beside it. The Instruction is that history, session by session in the file's
order, each headed by its date, then the question with its date, in one user
message (the Direct Agent's turns are user messages, and the history holds the
assistant's turns too). Items of `longmemeval_m` (about 1.5 million tokens)
are over the 2 MiB limit and are left out, one sentence each.

The check. The answer must hold each word and number of the expected answer,
case and punctuation aside. That needs whole-word matching and punctuation
removed from the answer as well as from the expected text, which the
Verifier's `contains` (a substring test) cannot say: "2" would be found in
"2023". So it is a program check, `checks/longmemeval.py` shipped as
`tests/check.py` with the expected answer as `tests/longmemeval.json`. The
dataset's own metric is a model judge; this lexical rule is stricter on long
expected answers (the preference items describe what a good answer holds, and
all of their words are then required).

Abstention. Items whose `question_id` ends in `_abs` ask about something the
history never mentions, and the expected behaviour is to say so. Every
Instruction (not only those, so the Instruction does not give the case away)
says to answer "I don't know" when the history does not hold the answer, and
an abstention item's check is a `regex` for that phrase, case-insensitive,
with "do not", "don't" (either apostrophe) or "dont". Its reference answer is
"I don't know." followed by the dataset's explanation.

Task names are `longmemeval-<question_id>`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from amber_pipeline.benchmarks.adapters.checks.longmemeval import words
from amber_pipeline.benchmarks.adapters.dataset_files import Record, records, text
from amber_pipeline.benchmarks.adapters.task_folders import AdaptedItem, StaticTask, TaskFile, task_name
from amber_pipeline.benchmarks.static import StaticChecks
from amber_pipeline.errors import AmberError

DATASET = "LongMemEval"
DESCRIPTION = "LongMemEval questions over a long, dated chat history (JSON list): the answer must hold each word " \
              "of the expected answer; abstention items expect \"I don't know\"."
TIMEOUT_SEC = 600.0
CHECK = "tests/check.py"
EXPECTED = "tests/longmemeval.json"
ABSTENTION_SUFFIX = "_abs"
REFUSAL = r"(?i)\bI\s+(?:do\s+not|don['\u2019]?t)\s+know\b"
REQUEST = "Answer the question from the chat history above. If the history does not hold the answer, say " \
          "\"I don't know\"."
LEAD = "Below are your earlier chat sessions with the user, each with its date. A question about them follows."
_CHECK_PROGRAM = Path(__file__).parent / "checks" / "longmemeval.py"


def items(source: Path, limit: int | None = None) -> Iterator[AdaptedItem]:
    """The file's items as static Tasks."""
    program = TaskFile(CHECK, _CHECK_PROGRAM.read_bytes(), executable=True)
    for record in records(source, DATASET, limit):
        question_id = text(record, "question_id", DATASET).strip()
        question = text(record, "question", DATASET).strip()
        answer = text(record, "answer", DATASET, numbers=True).strip()
        question_date = text(record, "question_date", DATASET).strip()
        history = _history(record)
        turn = f"{LEAD}\n\n{history}\n\n## The question, asked on {question_date}\n\n{question}\n\n{REQUEST}"
        provenance: list[tuple[str, str | int]] = [
            ("dataset", DATASET), ("dataset_index", record.index), ("dataset_id", question_id)]
        if isinstance(record.data.get("question_type"), str):
            provenance.append(("question_type", record.data["question_type"]))
        files: tuple[TaskFile, ...]
        if question_id.endswith(ABSTENTION_SUFFIX):
            checks, files, reference = StaticChecks(regex=REFUSAL), (), f"I don't know. {answer}"
        else:
            if not words(answer):
                raise AmberError(f"{record.where} has an answer with no word or number to look for: fix the item "
                                 "or give the LongMemEval file as published.")
            expected = TaskFile(EXPECTED, (json.dumps({"answer": answer}, ensure_ascii=False) + "\n").encode())
            checks, files, reference = StaticChecks(program=CHECK), (program, expected), answer
        task = StaticTask(
            name=task_name("longmemeval-", question_id),
            turns=(turn,),
            checks=checks,
            answer=reference,
            provenance=tuple(provenance),
            timeout_sec=TIMEOUT_SEC,
            where=record.where,
            files=files,
        )
        yield AdaptedItem(record.index, question_id, task, REQUEST)


def _history(record: Record) -> str:
    """The chat sessions as text, each headed by its number and date."""
    sessions, dates = record.data.get("haystack_sessions"), record.data.get("haystack_dates")
    if not isinstance(sessions, list) or not sessions:
        raise _bad(record, "no haystack_sessions list of chat sessions")
    if not isinstance(dates, list) or len(dates) != len(sessions) or not all(isinstance(d, str) for d in dates):
        raise _bad(record, f"haystack_dates that are not {len(sessions)} texts, one per session")
    out = []
    for n, (session, date) in enumerate(zip(sessions, dates, strict=True), 1):
        if not isinstance(session, list):
            raise _bad(record, f"a session {n} that is not a list of turns")
        lines = [f"## Session {n}, on {date.strip()}"]
        lines += [_turn(record, n, turn) for turn in session]
        out.append("\n\n".join(lines))
    return "\n\n".join(out)


def _turn(record: Record, session: int, turn: Any) -> str:
    if not isinstance(turn, dict) or not isinstance(turn.get("role"), str) or not isinstance(turn.get("content"),
                                                                                                str):
        raise _bad(record, f"a turn in session {session} without a role and a content text")
    return f"{turn['role'].strip().capitalize()}: {turn['content'].strip()}"


def _bad(record: Record, problem: str) -> AmberError:
    return AmberError(f"{record.where} has {problem}: fix the item or give the LongMemEval file as published.")
