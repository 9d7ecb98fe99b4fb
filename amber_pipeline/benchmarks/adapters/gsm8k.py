"""GSM8K (Cobbe et al. 2021, github.com/openai/grade-school-math) as static Tasks.

The published file is JSON Lines, one `{"question": ..., "answer": ...}` per
line, where the answer is a worked solution ending in `#### 72`. The number
after `####`, commas removed, is what a Task checks: the built-in Verifier's
`number` check reads the answer's last number (commas in groups of three
allowed) and compares it within `TOLERANCE`, so the Instruction asks the Model
to end with the final number. The worked solution is the reference answer; its
last number is the one after `####`, so it passes its own check.

GSM8K items have no id: the Task of the item on line n is `gsm8k-000n` (four
digits at least), and `dataset_index` in its task.toml is its 0-based position
among the file's items.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

from amber_pipeline.benchmarks.adapters.dataset_files import records, text
from amber_pipeline.benchmarks.adapters.task_folders import AdaptedItem, StaticTask
from amber_pipeline.benchmarks.static import StaticChecks
from amber_pipeline.errors import AmberError

DATASET = "GSM8K"
DESCRIPTION = "GSM8K math word problems (JSONL of question and answer): the answer's last number must be the one " \
              "after ####."
TOLERANCE = 1e-6
TIMEOUT_SEC = 120.0
REQUEST = "Solve the problem step by step, then give the final answer as a number on the last line."
_FINAL = re.compile(r"####\s*([^\n]*?)\s*\Z")


def items(source: Path, limit: int | None = None) -> Iterator[AdaptedItem]:
    """The file's items as static Tasks."""
    for record in records(source, DATASET, limit):
        question = text(record, "question", DATASET).strip()
        answer = text(record, "answer", DATASET)
        final = _FINAL.search(answer.rstrip())
        written = final.group(1).replace(",", "") if final else ""
        try:
            value = float(written)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            found = f"\"{final.group(1)}\" after its ####" if final and final.group(1) else "no #### line"
            raise AmberError(f"{record.where} has {found} where a GSM8K answer ends with #### and the final number: "
                             "fix the item or give the GSM8K file as published.")
        task = StaticTask(
            name=f"gsm8k-{record.index + 1:04d}",
            turns=(f"{question}\n\n{REQUEST}",),
            checks=StaticChecks(number=value, tolerance=TOLERANCE),
            answer=answer,
            provenance=(("dataset", DATASET), ("dataset_index", record.index)),
            timeout_sec=TIMEOUT_SEC,
            where=record.where,
        )
        yield AdaptedItem(record.index, None, task, REQUEST)
