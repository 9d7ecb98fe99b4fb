"""Dataset files as the user has them: JSON Lines, a JSON list or Parquet, gzipped or not.

Published datasets come in these forms (GSM8K and HumanEval as JSON Lines,
HumanEval gzipped, LongMemEval as one JSON list, MRCR as Parquet on the Hugging
Face Hub, or as JSON Lines when exported from it). The form is told by the
bytes, not the file name: gzip and Parquet by their magic numbers, a JSON list
by its first character. Each item comes with where it is (`file line 3`,
`file item 3`, `file row 3`, counted from 1), so every problem with an item is
one sentence naming the file and the item. A file that cannot be read at all
is one such sentence too; nothing here raises anything but `AmberError`.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amber_pipeline.errors import AmberError

_PARQUET_MAGIC = b"PAR1"
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Record:
    """One item of a dataset file."""

    where: str  # "data/test.jsonl line 3"
    index: int  # 0-based position among the file's items (blank lines are not items)
    data: dict[str, Any]


def records(source: Path, dataset: str, limit: int | None = None) -> Iterator[Record]:
    """The file's items in order, the first ``limit`` of them when given."""
    if limit is not None and limit < 1:
        raise AmberError(f"A limit of {limit} items adapts nothing: give a limit of 1 or more, or none.")
    if not source.is_file():
        raise AmberError(f"No file at {source}: give the path of the {dataset} file.")
    with open(source, "rb") as f:
        head = f.read(4)
    if head == _PARQUET_MAGIC:
        found = _parquet(source, dataset)
    else:
        try:
            raw = gzip.decompress(source.read_bytes()) if head[:2] == _GZIP_MAGIC else source.read_bytes()
            text = raw.decode("utf-8-sig")
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise AmberError(f"{source} is neither UTF-8 JSON text nor gzipped JSON ({e}): give the {dataset} "
                             "file as published.") from None
        found = _json_list(source, text, dataset) if text.lstrip().startswith("[") else _json_lines(source, text,
                                                                                                      dataset)
    for record in found:
        if limit is not None and record.index >= limit:
            return
        yield record


def _json_lines(source: Path, text: str, dataset: str) -> Iterator[Record]:
    index = 0
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            if index == 0 and _is_one_object(text):
                raise AmberError(f"{source} is one JSON object, not a JSON list of items nor one object per line: "
                                 f"give the {dataset} file as published.") from None
            raise AmberError(f"{source} line {n} is not valid JSON ({e.msg} at column {e.colno}): give the "
                             f"{dataset} file as published, one JSON object per line.") from None
        where = f"{source} line {n}"
        yield Record(where, index, _object(data, where, dataset))
        index += 1


def _is_one_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


def _json_list(source: Path, text: str, dataset: str) -> Iterator[Record]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as e:
        raise AmberError(f"{source} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}): give the "
                         f"{dataset} file as published.") from None
    if not isinstance(items, list):
        raise AmberError(f"{source} is not a JSON list of items: give the {dataset} file as published.")
    for i, data in enumerate(items):
        where = f"{source} item {i + 1}"
        yield Record(where, i, _object(data, where, dataset))


def _parquet(source: Path, dataset: str) -> Iterator[Record]:
    import pyarrow as pa  # deferred: only Parquet files need it
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(source).to_pylist()
    except (OSError, pa.ArrowException) as e:
        raise AmberError(f"{source} is not a readable Parquet file ({e}): give the {dataset} file as "
                         "published.") from None
    for i, data in enumerate(rows):
        yield Record(f"{source} row {i + 1}", i, data)


def _object(data: Any, where: str, dataset: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise AmberError(f"{where} is not a JSON object: give the {dataset} file as published, whose items are "
                         "objects.")
    return data


def text(record: Record, key: str, dataset: str, *, numbers: bool = False) -> str:
    """A non-empty text field of an item (a number too, as written, when ``numbers``), or one sentence."""
    value = record.data.get(key)
    if numbers and isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        shown = "no" if value is None else "an empty" if value == "" else "a non-text"
        raise AmberError(f"{record.where} has {shown} \"{key}\" field where a {dataset} item has a text: fix the "
                         f"item or give the {dataset} file as published.")
    return value


def number(record: Record, key: str, dataset: str) -> int:
    """A whole-number field of an item, or one sentence."""
    value = record.data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise AmberError(f"{record.where} has no whole number in its \"{key}\" field: fix the item or give the "
                         f"{dataset} file as published.")
    return value
