"""Sharded multi-turn variants of GSM8K and HumanEval, after Laban et al. 2025, "LLMs Get Lost in Multi-Turn
Conversation" (arXiv:2505.06120).

A sharded Task gives a problem one fragment ("shard") per turn, as a user who
reveals what they want bit by bit; the Model answers every turn and only the
last answer is checked. Its control, `concat`, gives the same fragments at
once, as a list in one turn. Both Benchmarks have the same Task names and the
same checks as the base adapter's Tasks (for HumanEval the same program and
item data), so the difference between their scores is the cost of the
conversation alone.

The shards file, which the user writes (the paper's shards are per item and
hand-checked): JSON Lines, one object per sharded item,

    {"index": 0, "shards": ["Janet's ducks lay 16 eggs per day.", "She eats three for breakfast.", ...]}
    {"task_id": "HumanEval/0", "shards": ["Write has_close_elements(numbers, threshold).", ...]}

where `index` is the item's 0-based position in the base file (any base) and
`task_id` its HumanEval id; `shards` are non-empty texts, the first usually
the request's gist. Only the items it names are adapted, each once.

The sharded Instruction's turns are the shards, then a last turn "That is all
the information." with the base adapter's request for the answer's form (the
final number; the function in a ```python block). The concat Instruction is
one turn: a lead, the shards as a bullet list, and the same request. An item
either variant must leave out (too long, a turn-marker line) is left out of
both, so the names stay the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

from amber_pipeline.benchmarks.adapters.dataset_files import Record, records
from amber_pipeline.benchmarks.adapters.gsm8k import items as gsm8k_items
from amber_pipeline.benchmarks.adapters.humaneval import items as humaneval_items
from amber_pipeline.benchmarks.adapters.task_folders import (
    AdaptedBenchmark,
    AdaptedItem,
    StaticTask,
    refusal,
    staged,
    write_tasks,
)
from amber_pipeline.errors import AmberError

DESCRIPTION = "A multi-turn sharded variant of gsm8k or humaneval (Laban et al. 2025) from a shards file, with a " \
              "single-turn concat control of the same Task names."
BASES: dict[str, Callable[[Path, int | None], Iterator[AdaptedItem]]] = {
    "gsm8k": gsm8k_items, "humaneval": humaneval_items}
SHARDS = "shards file"
TIMEOUT_SEC = 300.0
LAST_TURN = "That is all the information."
CONCAT_LEAD = "Here is all the information about the problem."


def adapt_sharded(base_kind: str, source: Path, shards: Path, dest: Path, *,
                  name: str | None = None) -> tuple[AdaptedBenchmark, AdaptedBenchmark]:
    """Write ``dest/sharded`` and ``dest/concat``: the items ``shards`` names, one fragment per turn and all at once."""
    if base_kind not in BASES:
        raise AmberError(f"There is no sharded variant of {base_kind}: choose a base of {', '.join(BASES)}.")
    wanted = _shards(shards)
    pairs: list[tuple[StaticTask, StaticTask]] = []
    refused: list[str] = []
    for item in BASES[base_kind](source, None):
        key = _key(item, wanted)
        if key is None:
            continue
        record, fragments = wanted.pop(key)
        pair = _variants(item, fragments, record)
        why = refusal(pair[0]) or refusal(pair[1])
        if why is not None:
            refused.append(why)
        else:
            pairs.append(pair)
    if wanted:
        record, _ = next(iter(wanted.values()))
        raise AmberError(f"{record.where} names an item that {source} does not have: give the 0-based index or the "
                         "task_id of an item of that file.")
    label = name or dest.name
    out = []
    with staged(dest) as staging:
        for i, variant in enumerate(("sharded", "concat")):
            n, _ = write_tasks((p[i] for p in pairs), staging / variant, shards)
            out.append(AdaptedBenchmark(dest / variant, f"{label}-{variant}", n, variant, tuple(refused)))
    return out[0], out[1]


def _shards(path: Path) -> dict[str | int, tuple[Record, tuple[str, ...]]]:
    """The shards file: item key (its task_id, or its index) -> (where it is written, its fragments)."""
    found: dict[str | int, tuple[Record, tuple[str, ...]]] = {}
    for record in records(path, SHARDS):
        data = record.data
        key: str | int | None = data.get("task_id") if isinstance(data.get("task_id"), str) else data.get("index")
        if isinstance(key, bool) or not isinstance(key, str | int) or (isinstance(key, int) and key < 0):
            raise AmberError(f"{record.where} has neither a task_id text nor a 0-based index: name the item it "
                             "shards with one of them.")
        fragments = data.get("shards")
        if not isinstance(fragments, list) or not fragments or not all(
                isinstance(s, str) and s.strip() for s in fragments):
            raise AmberError(f"{record.where} has no \"shards\" list of non-empty texts: give the item's fragments, "
                             "one per turn, in order.")
        if key in found:
            raise AmberError(f"{found[key][0].where} and {record.where} shard the same item: keep one of them.")
        found[key] = (record, tuple(s.strip() for s in fragments))
    return found


def _key(item: AdaptedItem, wanted: dict[str | int, tuple[Record, tuple[str, ...]]]) -> str | int | None:
    if item.item_id is not None and item.item_id in wanted:
        return item.item_id
    return item.index if item.index in wanted else None


def _variants(item: AdaptedItem, fragments: tuple[str, ...], record: Record) -> tuple[StaticTask, StaticTask]:
    base = item.task
    bullets = "\n".join("- " + fragment.replace("\n", "\n  ") for fragment in fragments)
    provenance = (*base.provenance, ("shards", len(fragments)))
    where = f"{base.where} (sharded by {record.where})"
    sharded = dataclasses.replace(
        base, turns=(*fragments, f"{LAST_TURN} {item.request}"), timeout_sec=TIMEOUT_SEC, where=where,
        provenance=(*provenance, ("variant", "sharded")))
    concat = dataclasses.replace(
        base, turns=(f"{CONCAT_LEAD}\n\n{bullets}\n\n{item.request}",), timeout_sec=TIMEOUT_SEC, where=where,
        provenance=(*provenance, ("variant", "concat")))
    return sharded, concat
