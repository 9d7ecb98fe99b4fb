"""SQL text for DuckDB: quoted literals, and statements with their ``?`` parameters written in as literals.

DuckDB cannot bind a file path in ATTACH or COPY. And binding any parameter
from Python makes DuckDB 1.5 import pandas, to tell pandas' NA and NaT from
other values: a third of a second on these machines, which a command that reads
the catalog and prints a table has no other use for. So the catalog's
connections write their parameters into the statement (`Literals`), as typed
literals of the types DuckDB would bind, and the scoring path writes its own.
A value with no literal here is bound as before.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any


def string(value: str | Path) -> str:
    """A SQL string literal: single quotes, inner quotes doubled."""
    return "'" + str(value).replace("'", "''") + "'"


def literal(value: object) -> str:
    """A SQL literal for None, a bool, an int, a float (NaN and infinities included) or a string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"'{value!r}'::double"  # parsed as a double, exactly (a bare 0.1 would be a DECIMAL)
    if isinstance(value, str):
        return string(value)
    raise TypeError(f"no SQL literal for {type(value).__name__}")


_INTEGERS = (("integer", -(2**31), 2**31), ("bigint", -(2**63), 2**63), ("ubigint", 0, 2**64))


def typed(value: object) -> str | None:
    """The literal of ``value`` with the type DuckDB gives the Python value when it binds it, or None when this
    module has none (a dict, an object): that value is bound instead."""
    if isinstance(value, bool) or value is None:
        return literal(value)
    if isinstance(value, int):
        kind = next((k for k, low, high in _INTEGERS if low <= value < high), "hugeint")
        return f"cast({value} as {kind})"
    if isinstance(value, float):
        return literal(value)
    if isinstance(value, str):
        return f"{_text(value)}::varchar"
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, dt.datetime):
        return f"{string(value.isoformat())}::{'timestamptz' if value.tzinfo is not None else 'timestamp'}"
    if isinstance(value, dt.date):
        return f"{string(value.isoformat())}::date"
    if isinstance(value, uuid.UUID):
        return f"{string(str(value))}::uuid"
    if isinstance(value, bytes):
        return "'" + "".join(f"\\x{b:02x}" for b in value) + "'::blob"
    if isinstance(value, list | tuple):
        items = [typed(v) for v in value]
        return None if None in items else "[" + ", ".join(i for i in items if i is not None) + "]"
    return None


def _text(value: str) -> str:
    """A string literal that may hold NUL characters, which DuckDB's SQL text cannot: those are chr(0)."""
    return " || chr(0) || ".join(string(part) for part in value.split("\x00"))


def _decimal(value: Decimal) -> str | None:
    if not value.is_finite():
        return None
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(0, -exponent)
    width = max(len(digits) + max(0, exponent), scale + 1)
    return f"{string(format(value, 'f'))}::decimal({width}, {scale})" if width <= 38 else literal(float(value))


def parameters(query: str) -> list[str]:
    """The statement's text between its ``?`` parameters (n parameters, n + 1 pieces): a ``?`` inside a string
    literal, a quoted name or a comment is text."""
    pieces, start, i, n = [], 0, 0, len(query)
    while i < n:
        ch = query[i]
        if ch in "'\"":
            i = query.find(ch, i + 1)  # a doubled quote inside is two quoted runs back to back: the same text
            i = n if i < 0 else i + 1
        elif query.startswith("--", i):
            i = query.find("\n", i)
            i = n if i < 0 else i + 1
        elif query.startswith("/*", i):
            i = query.find("*/", i + 2)
            i = n if i < 0 else i + 2
        else:
            if ch == "?":
                pieces.append(query[start:i])
                start = i + 1
            i += 1
    return [*pieces, query[start:]]


def written(query: str, values: Sequence[object]) -> str | None:
    """The statement with each ``?`` replaced by its value's literal (`typed`), or None when a value has none or
    the count differs (then DuckDB binds them, and says what is wrong)."""
    pieces = parameters(query)
    literals = [typed(v) for v in values]
    if len(pieces) != len(literals) + 1 or None in literals:
        return None
    return pieces[0] + "".join(f"{v}{p}" for v, p in zip(literals, pieces[1:], strict=True))


class Literals:
    """A DuckDB connection whose ``execute`` writes a statement's parameters into it (`written`), so no pandas
    is imported; everything else is the connection's own."""

    def __init__(self, con: Any):
        self._con = con

    def execute(self, query: str, parameters: Sequence[object] | None = None, /) -> Literals:
        text = written(query, parameters) if parameters else query
        if text is None:
            self._con.execute(query, parameters)
        else:
            self._con.execute(text)
        return self

    def executemany(self, query: str, rows: Iterable[Sequence[object]], /) -> Literals:
        for row in rows:
            self.execute(query, row)
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def values(rows: Iterable[Iterable[object]]) -> str:
    """``(a, b), (c, d)``: the rows of a VALUES list."""
    return ", ".join("(" + ", ".join(literal(v) for v in row) + ")" for row in rows)


def path_list(paths: Iterable[Path]) -> str:
    """``['a', 'b']``: a list of file paths, for read_parquet."""
    return "[" + ", ".join(string(p) for p in paths) + "]"


def parquet_files(paths: Iterable[Path]) -> str:
    """A FROM-clause over local Parquet files as one table: columns matched by name (a file that lacks one
    reads it as null), and no partition columns read from folder names."""
    return f"read_parquet({path_list(paths)}, union_by_name = true, hive_partitioning = false)"
