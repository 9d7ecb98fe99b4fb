"""HumanEval (Chen et al. 2021, github.com/openai/human-eval) as static Tasks.

The published file is JSON Lines (`HumanEval.jsonl.gz`, gzipped or not), one
item per line with `task_id`, `prompt` (imports, a signature and a
docstring), `canonical_solution` (the body), `test` (a `check(candidate)`
function) and `entry_point` (the function's name). The Instruction shows the
prompt and asks for the complete function in a ```python block; the Task's
program check (`checks/humaneval.py`, shipped as `tests/check.py` with the
item as `tests/humaneval.json`) runs the dataset's tests on the answer's last
function. That check runs the answer on the host, hardened but NOT in a
sandbox: its docstring says how, and what it does not stop.

The reference answer is the prompt followed by the canonical solution, in a
```python block, which is the function the dataset's own evaluation runs.
Task names come from the ids: `HumanEval/0` is `HumanEval-0`.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path

from amber_pipeline.benchmarks.adapters.dataset_files import Record, records, text
from amber_pipeline.benchmarks.adapters.task_folders import AdaptedItem, StaticTask, TaskFile, task_name
from amber_pipeline.benchmarks.static import StaticChecks
from amber_pipeline.errors import AmberError

DATASET = "HumanEval"
DESCRIPTION = "HumanEval Python functions (JSONL of task_id, prompt, test, entry_point): the answer's last " \
              "function must pass the item's tests, run on the host with limits (not a sandbox)."
TIMEOUT_SEC = 180.0
CHECK = "tests/check.py"
ITEM = "tests/humaneval.json"
_CHECK_PROGRAM = Path(__file__).parent / "checks" / "humaneval.py"


def request(entry_point: str) -> str:
    return (f"Reply with the complete Python function `{entry_point}`, its signature and its body, in one "
            "```python code block.")


def items(source: Path, limit: int | None = None) -> Iterator[AdaptedItem]:
    """The file's items as static Tasks."""
    program = TaskFile(CHECK, _CHECK_PROGRAM.read_bytes(), executable=True)
    for record in records(source, DATASET, limit):
        task_id = text(record, "task_id", DATASET).strip()
        prompt = text(record, "prompt", DATASET)
        solution = text(record, "canonical_solution", DATASET)
        test = text(record, "test", DATASET)
        entry_point = text(record, "entry_point", DATASET).strip()
        if not entry_point.isidentifier():
            raise _bad(record, f"an entry_point \"{entry_point}\" that is not a Python name")
        _parses(record, "prompt", prompt)
        _parses(record, "test", test)
        reference = prompt + solution
        if entry_point not in _functions(_parses(record, "prompt and canonical_solution", reference)):
            raise _bad(record, f"no function {entry_point} in its prompt and canonical_solution")
        if "check" not in _functions(_parses(record, "test", test)):
            raise _bad(record, "a test without a check function")
        item = {"entry_point": entry_point, "prompt": prompt, "task_id": task_id, "test": test}
        ask = request(entry_point)
        shown, answer = prompt.strip("\n"), reference.strip("\n")
        task = StaticTask(
            name=task_name("", task_id),
            turns=(f"Complete the following Python function.\n\n```python\n{shown}\n```\n\n{ask}",),
            checks=StaticChecks(program=CHECK),
            answer=f"```python\n{answer}\n```\n",
            provenance=(("dataset", DATASET), ("dataset_index", record.index), ("dataset_id", task_id)),
            timeout_sec=TIMEOUT_SEC,
            where=record.where,
            files=(program, TaskFile(ITEM, (json.dumps(item, indent=1, ensure_ascii=False) + "\n").encode())),
        )
        yield AdaptedItem(record.index, task_id, task, ask)


def _parses(record: Record, what: str, code: str) -> ast.Module:
    try:
        return ast.parse(code)
    except SyntaxError as e:
        raise _bad(record, f"a {what} that is not valid Python (line {e.lineno}: {e.msg})") from None


def _functions(tree: ast.Module) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def _bad(record: Record, problem: str) -> AmberError:
    return AmberError(f"{record.where} has {problem}: fix the item or give the HumanEval file as published.")
