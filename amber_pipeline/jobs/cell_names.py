"""Cell names: what people read in the UI, for cells whose keys are made for machines.

A cell's key (``bv=<id>|agent=<agent>@<spec>|mc=<name>@<id>``) is its identity
and stays so; its name is the Dagster partition key people see in lists, where
a key is cut in the middle. A name is given once, when a Job first quotes the
cell, and never changes: ``<benchmark label>/<agent>/<model>``, with short ids
added only when that name is taken by another cell.
"""

from __future__ import annotations

from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.warehouse.catalog import Connection, Warehouse
from amber_pipeline.warehouse.locks import lock_names


def assign(con: Connection, cells: list[Cell], benchmark_label: str) -> None:
    """Give each new cell a name people can read, unique for good: ``<benchmark label>/<agent>/<model>``.

    A name already taken by another cell (an Agent Version or Model Configuration changed under the same
    name, or another owner's label) gets the short ids that tell them apart; the cell key stays the identity.
    """
    unnamed = [cell for cell in cells
             if not con.execute("select 1 from cell_names where cell_key = ?", [cell.key]).fetchone()]
    if not unnamed:
        return
    lock_names(con, "cell_names")  # a write of another Workspace may be naming the same cell, or taking a name
    for cell in unnamed:
        if con.execute("select 1 from cell_names where cell_key = ?", [cell.key]).fetchone():  # it did, first
            continue
        for candidate in _candidate_names(cell, benchmark_label):
            if "..." in candidate:  # Dagster refuses it in a partition key
                continue
            if not con.execute("select 1 from cell_names where name = ?", [candidate]).fetchone():
                con.execute("insert into cell_names (cell_key, name) values (?, ?)", [cell.key, candidate])
                break


def _candidate_names(cell: Cell, benchmark_label: str) -> list[str]:
    """The plain name first, then with the Agent's and Model Configuration's short ids, then with the
    Benchmark Version's too: the last is as unique as the key itself, which ends the list."""
    model = [] if cell.model_configuration == NO_MODEL else [cell.model_name]
    model_id = [] if not model else [f"{cell.model_name}@{cell.model_configuration.partition('@')[2][:8]}"]
    agent_id = f"{cell.agent}@{cell.agent_spec_id}"
    return ["/".join([benchmark_label, cell.agent, *model]),
            "/".join([benchmark_label, agent_id, *model_id]),
            "/".join([f"{benchmark_label}#{cell.benchmark_version_id[:12]}", agent_id, *model_id]),
            cell.key]


def of(con: Connection, keys: list[str]) -> dict[str, str]:
    """Cell key -> name (a cell recorded before names were given is named by its key)."""
    rows = con.execute("select cell_key, name from cell_names where cell_key in (select unnest(?))",
                       [keys]).fetchall() if keys else []
    return {key: key for key in keys} | dict(rows)


def read(wh: Warehouse, keys: list[str]) -> dict[str, str]:
    with wh.read() as con:
        return of(con, keys)


def key_of(wh: Warehouse, name: str) -> str:
    """The cell a name (a Dagster partition key) stands for; a key that is no name is a cell key itself."""
    with wh.read() as con:
        row = con.execute("select cell_key from cell_names where name = ?", [name]).fetchone()
    return row[0] if row else name
