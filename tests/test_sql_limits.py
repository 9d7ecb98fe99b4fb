"""What `amber sql` gives back is bounded and shows nothing of the server.

A result has a row cap (`test_sql_confinement.py`) and a byte cap: past MAX_RESULT_BYTES the query is refused in
one sentence, whether the bytes come in one value or many rows, and the rows past the cap are never fetched, so
an oversized result is neither held in Python nor sent (measured here with tracemalloc: what Python allocated). No
setting or catalog function shows a folder of the server (its home, AMBER_HOME, its temporary folder), nor does
`benchmark_versions.source_path`: through the API that was the spool a Benchmark folder was unpacked in, and now
a folder shows by the name its user gave it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from helpers import cli, funded, ok, refusal

from amber_pipeline.errors import AmberError
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse import confined, views
from amber_pipeline.warehouse.catalog import Warehouse

BOTH_MODES = pytest.mark.usefixtures("cli_mode")  # on the embedded default, then against `amber serve`
STATIC = PROJECT_ROOT / "examples" / "static-bench"
TOO_LARGE = (f"The query returned more than {confined.MAX_RESULT_BYTES // 1_000_000} MB: select fewer or shorter "
             "columns, filter the rows or add a limit.")


# ---- the byte cap -----------------------------------------------------------------------------------------------

@BOTH_MODES
def test_one_value_past_the_byte_cap_is_refused_in_one_sentence(warehouse: Warehouse) -> None:
    assert refusal(cli("sql", f"select repeat(chr(120), {confined.MAX_RESULT_BYTES + 1})")) == TOO_LARGE


def test_many_rows_past_the_byte_cap_are_refused_before_they_are_all_fetched(warehouse: Warehouse) -> None:
    rows, width = 50_000, 10_000  # 500 MB of text in fewer rows than the row cap
    assert rows < confined.MAX_ROWS and rows * width > 7 * confined.MAX_RESULT_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(AmberError) as refused:
            confined.run(warehouse, "default", f"select repeat('x', {width}) from range({rows})")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(refused.value) == TOO_LARGE
    assert peak < 1.5 * confined.MAX_RESULT_BYTES, f"{peak / 1e6:.0f} MB held for a refused result"


def test_a_result_within_the_byte_cap_comes_back_whole(warehouse: Warehouse) -> None:
    rows = confined.MAX_RESULT_BYTES // 1_100  # rows of a thousand characters, and what the count adds per row
    got = confined.run(warehouse, "default", f"select range, repeat('x', 1000) from range({rows})").rows
    assert len(got) == rows and got[-1] == (rows - 1, "x" * 1000)
    assert confined.run(warehouse, "default", "select [1, 2], {'a': 'b'}, 1.5, null").rows == [
        ([1, 2], {"a": "b"}, 1.5, None)]


# ---- no folder of the server ------------------------------------------------------------------------------------

def server_folders(warehouse: Warehouse) -> list[str]:
    """The folders of the server a value must not name."""
    return [str(warehouse.paths.home), str(Path.home()), tempfile.gettempdir(), str(PROJECT_ROOT), sys.prefix,
            os.getcwd()]


def catalog_functions(warehouse: Warehouse) -> list[str]:
    """Every DuckDB table function about DuckDB itself (duckdb_settings(), pragma_version(), ...)."""
    found = confined.run(warehouse, "default", """
        select distinct function_name from duckdb_functions()
        where function_type = 'table' and (function_name like 'duckdb_%' or function_name like 'pragma_%')""")
    return sorted(name for (name,) in found.rows)


@pytest.fixture
def quoted_folder(warehouse: Warehouse, tmp_path: Path) -> str:
    """A Job quoted from a Benchmark folder (through the API, the folder travels and is unpacked in a spool)."""
    bench = tmp_path / "my-bench"
    shutil.copytree(STATIC, bench)
    funded(warehouse)
    ok(cli("job", "quote", str(bench), "--agent", "direct", "--model", "replay-strong"))
    return bench.name


def test_no_setting_or_catalog_function_shows_a_folder_of_the_server(warehouse: Warehouse,
                                                                      quoted_folder: str) -> None:
    folders = server_folders(warehouse)
    names = catalog_functions(warehouse)
    assert {"duckdb_settings", "duckdb_databases", "duckdb_secrets", "duckdb_extensions",
            "duckdb_temporary_files", "duckdb_logs", "pragma_platform"} <= set(names)
    queries = [f"select * from {name}()" for name in names] + [
        "select * from pragma_database_list", "select current_setting('home_directory')",
        "select name, current_setting(name) from duckdb_settings()"]
    answered = 0
    for query in queries:
        # the views too, so the tables their rows were loaded into (from the catalog and files) are there
        query = f"{query} -- {' '.join(sorted(views.VIEW_NAMES))}"
        try:
            shown = json.dumps(confined.run(warehouse, "default", query).rows, default=str)
            answered += 1
        except AmberError as refused:  # one that reads files, or wants arguments: the sentence names no folder
            shown = str(refused)
        assert not [f for f in folders if f in shown], (query, shown)
    assert answered > 25


@BOTH_MODES
def test_settings_and_benchmark_versions_show_no_folder_of_the_server(warehouse: Warehouse,
                                                                      quoted_folder: str) -> None:
    settings = ok(cli("sql", "select name, value from duckdb_settings()"))
    assert "secret_directory" in settings
    assert not [f for f in server_folders(warehouse) if f in settings], settings
    versions = ok(cli("sql", "select * from benchmark_versions"))
    assert not [f for f in server_folders(warehouse) if f in versions], versions
    shown = ok(cli("sql", "select source_path from benchmark_versions where origin = 'folder'"))
    assert f" {quoted_folder} " in shown and "/" not in shown.split("source_path", 1)[1], shown
