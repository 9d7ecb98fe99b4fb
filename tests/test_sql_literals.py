"""The catalog's parameters written into statements (`warehouse/sql.py`) mean what DuckDB's own binding means:
the same value and the same type for every kind Amber sends, and a `?` inside text is never a parameter."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal

import duckdb
import pytest

from amber_pipeline.warehouse import sql

VALUES = [None, True, False, 0, -5, 2**31, -(2**31) - 1, 2**40, 2**63 - 1, 2**63, -(2**63), 1.5, 0.1, -2.5,
          float("inf"), -0.0, "a'b", "", "x?y", "-- not a comment", "/* nor this */", "nul\x00z", "日本", "\\n",
          Decimal("12.50"), Decimal("-3.000001"), Decimal("123456789012345678901234567890.12345678"),
          dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
          dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
          dt.date(2024, 2, 29), uuid.UUID("12345678-1234-5678-1234-567812345678"), b"\x00\xffab'", [1, 2, 3],
          ["a", "b'c"], (1.5, None)]


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_written_value_is_the_bound_value_with_its_type(con: duckdb.DuckDBPyConnection, value: object) -> None:
    query = "select ?, typeof(?)"
    text = sql.written(query, [value, value])
    assert text is not None and len(sql.parameters(text)) == 1  # no parameter left
    assert con.execute(text).fetchall() == con.execute(query, [value, value]).fetchall()


def test_nan_is_written_as_nan(con: duckdb.DuckDBPyConnection) -> None:
    text = sql.written("select ?", [math.nan])
    assert text is not None and math.isnan(con.execute(text).fetchall()[0][0])


@pytest.mark.parametrize("value", [Decimal("0.05"), Decimal("1E+3"), Decimal("-7")], ids=repr)
def test_a_decimal_keeps_its_value(con: duckdb.DuckDBPyConnection, value: Decimal) -> None:
    """DuckDB 1.5 binds Decimal("1E+3") as 1.000: the written literal keeps 1000."""
    text = sql.written("select ?", [value])
    assert text is not None and con.execute(text).fetchall() == [(value,)]


def test_a_question_mark_in_text_is_not_a_parameter() -> None:
    query = "select '?', \"a?\", ? -- ?\n, /* ? */ ?, 'it''s?'"
    assert sql.parameters(query) == ["select '?', \"a?\", ", " -- ?\n, /* ? */ ", ", 'it''s?'"]
    assert sql.written(query, [1, "x"]) == ("select '?', \"a?\", cast(1 as integer) -- ?\n, /* ? */ "
                                            "'x'::varchar, 'it''s?'")


def test_what_has_no_literal_is_bound_as_before(con: duckdb.DuckDBPyConnection) -> None:
    assert sql.written("select ?", [{"a": 1}]) is None
    assert sql.written("select ?, ?", [1]) is None  # DuckDB binds them and names the mismatch itself
    wrapped = sql.Literals(con)
    assert wrapped.execute("select ?", [{"a": 1}]).fetchall() == [({"a": 1},)]
    with pytest.raises(duckdb.InvalidInputException):
        wrapped.execute("select ?, ?", [1])


def test_a_string_cannot_end_its_literal(con: duckdb.DuckDBPyConnection) -> None:
    """A value is data, whatever it holds: a quote, a comment or a statement after it stays inside the string."""
    con.execute("create table if not exists t (name varchar)")
    hostile = "x'); drop table t; --"
    sql.Literals(con).execute("insert into t values (?)", [hostile])
    assert con.execute("select name from t").fetchall() == [(hostile,)]
