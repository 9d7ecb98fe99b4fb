"""OpenAI MRCR, multi-round co-reference resolution (huggingface.co/datasets/openai/mrcr), as static Tasks.

The published rows (Parquet on the Hub; JSON Lines when exported) have
`prompt` (a JSON text of a long list of chat messages, user and assistant
alternating, ending with the user's request, such as "Prepend XYZ to the 2nd
poem about tapirs"), `answer` (the expected reply, prefix included),
`random_string_to_prepend`, `n_needles`, `desired_msg_index`,
`total_messages` and `n_chars`.

The conversation already holds the assistant's turns, and the Direct Agent's
turns are user messages answered by the Model, so replaying it turn by turn is
not possible: the Instruction is one user message with the earlier
conversation as a numbered transcript, then the final request as written.
Rows of the 1M-token bins are over the 2 MiB limit and are left out, one
sentence each.

The check is the official grader (`checks/mrcr.py`, shipped as
`tests/check.py` with the row as `tests/mrcr.json`): the answer starts with
the random prefix and, after it, matches the expected text at 90% similarity
or more. The reference answer is the row's `answer`. MRCR rows have no id:
the Task of the n-th row is `mrcr-000n`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from amber_pipeline.benchmarks.adapters.dataset_files import Record, records, text
from amber_pipeline.benchmarks.adapters.task_folders import AdaptedItem, StaticTask, TaskFile
from amber_pipeline.benchmarks.static import StaticChecks
from amber_pipeline.errors import AmberError

DATASET = "MRCR"
DESCRIPTION = "OpenAI MRCR long-conversation recall (Parquet or JSONL rows): the answer must start with the " \
              "random prefix and match the expected text at 90% similarity or more."
TIMEOUT_SEC = 600.0
CHECK = "tests/check.py"
ROW = "tests/mrcr.json"
LEAD = "Below is an earlier conversation between a user and you, the assistant, as a transcript. The user's next " \
       "message follows it: reply to that message."
REQUEST = "Reply to the user's next message exactly as it asks."
_COUNTS = ("n_needles", "desired_msg_index", "total_messages", "n_chars")
_CHECK_PROGRAM = Path(__file__).parent / "checks" / "mrcr.py"


def items(source: Path, limit: int | None = None) -> Iterator[AdaptedItem]:
    """The file's rows as static Tasks."""
    program = TaskFile(CHECK, _CHECK_PROGRAM.read_bytes(), executable=True)
    for record in records(source, DATASET, limit):
        messages = _messages(record)
        answer = text(record, "answer", DATASET)
        prefix = text(record, "random_string_to_prepend", DATASET)
        if not answer.startswith(prefix):
            raise AmberError(f"{record.where} has an answer that does not start with its random_string_to_prepend: "
                             "fix the row or give the MRCR file as published.")
        transcript = "\n\n".join(f"## Message {n}, {m['role']}\n\n{m['content']}"
                                 for n, m in enumerate(messages[:-1], 1))
        turn = f"{LEAD}\n\n{transcript}\n\n## The user's next message\n\n{messages[-1]['content']}"
        row = {"answer": answer, "random_string_to_prepend": prefix}
        provenance: list[tuple[str, str | int]] = [("dataset", DATASET), ("dataset_index", record.index)]
        provenance += [(k, record.data[k]) for k in _COUNTS
                       if isinstance(record.data.get(k), int) and not isinstance(record.data[k], bool)]
        task = StaticTask(
            name=f"mrcr-{record.index + 1:04d}",
            turns=(turn,),
            checks=StaticChecks(program=CHECK),
            answer=answer,
            provenance=tuple(provenance),
            timeout_sec=TIMEOUT_SEC,
            where=record.where,
            files=(program, TaskFile(ROW, (json.dumps(row, ensure_ascii=False) + "\n").encode())),
        )
        yield AdaptedItem(record.index, None, task, REQUEST)


def _messages(record: Record) -> list[dict[str, Any]]:
    """The row's conversation, checked: messages with a role and a content text, the last one the user's."""
    raw = text(record, "prompt", DATASET)
    try:
        messages = json.loads(raw)
    except json.JSONDecodeError as e:
        raise _bad(record, f"a prompt that is not JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(messages, list) or not messages:
        raise _bad(record, "a prompt that is not a JSON list of chat messages")
    for n, m in enumerate(messages, 1):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise _bad(record, f"a prompt whose message {n} has no role and content text")
    if messages[-1]["role"] != "user" or not messages[-1]["content"].strip():
        raise _bad(record, "a prompt whose last message is not the user's request")
    return messages


def _bad(record: Record, problem: str) -> AmberError:
    return AmberError(f"{record.where} has {problem}: fix the row or give the MRCR file as published.")
