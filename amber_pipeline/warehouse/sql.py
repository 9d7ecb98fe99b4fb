"""SQL text for DuckDB: quoted literals, for the few statements that cannot take bound parameters.

DuckDB cannot bind a file path in ATTACH or COPY, and binding any parameter
from Python makes it import pandas (a third of a second on these machines),
which the scoring path avoids. Everything else binds its parameters.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


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
