"""Static adapters: published datasets, from files the user has, as Benchmarks of static Tasks.

Each adapter reads one dataset's file in its published form and writes one
static Task folder per item (`task_folders` says what a folder holds), which
the Direct Agent runs and the built-in Verifier checks. Nothing is downloaded:
the user brings the file, which may be a test split Amber has no right to
redistribute. The output is a function of the input alone, byte for byte, so
converting the same file twice gives the same Benchmark Version.

    adapt("gsm8k", Path("test.jsonl"), Path("benchmarks/gsm8k"), limit=100)
    adapt_sharded("gsm8k", Path("test.jsonl"), Path("shards.jsonl"), Path("benchmarks/gsm8k-sharded"))

A malformed file or item is one `AmberError` sentence naming the file, the
line (or item, or row) and the problem, and writes nothing; an item too long
for a static Task is left out and named in `AdaptedBenchmark.refused`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from amber_pipeline.benchmarks.adapters import gsm8k, humaneval, longmemeval, mrcr, sharded
from amber_pipeline.benchmarks.adapters.sharded import adapt_sharded
from amber_pipeline.benchmarks.adapters.task_folders import (
    MAX_INSTRUCTION_BYTES,
    AdaptedBenchmark,
    AdaptedItem,
    staged,
    write_tasks,
)
from amber_pipeline.errors import AmberError

__all__ = ["ADAPTERS", "MAX_INSTRUCTION_BYTES", "AdaptedBenchmark", "Adapter", "adapt", "adapt_sharded"]


@dataclass(frozen=True)
class Adapter:
    """A dataset Amber can adapt: its kind (what the CLI names), a one-line description, and its reader.

    ``items`` is None for `sharded`, which needs a base dataset and a shards file (`adapt_sharded`).
    """

    kind: str
    description: str
    items: Callable[[Path, int | None], Iterator[AdaptedItem]] | None


ADAPTERS: dict[str, Adapter] = {a.kind: a for a in (
    Adapter("gsm8k", gsm8k.DESCRIPTION, gsm8k.items),
    Adapter("humaneval", humaneval.DESCRIPTION, humaneval.items),
    Adapter("sharded", sharded.DESCRIPTION, None),
    Adapter("longmemeval", longmemeval.DESCRIPTION, longmemeval.items),
    Adapter("mrcr", mrcr.DESCRIPTION, mrcr.items),
)}


def adapt(kind: str, source: Path, dest: Path, *, limit: int | None = None,
          name: str | None = None) -> AdaptedBenchmark:
    """Write the first ``limit`` items (all by default) of the ``kind`` file ``source`` as Task folders in
    ``dest``, a new or empty folder; the Benchmark is called ``name`` (default: the folder's name)."""
    adapter = ADAPTERS.get(kind)
    if adapter is None:
        raise AmberError(f"There is no adapter for {kind}: choose one of {', '.join(ADAPTERS)}.")
    if adapter.items is None:
        raise AmberError(f"The {kind} adapter needs a base dataset and a shards file besides {source}: "
                         f"give both, as adapt_sharded does.")
    with staged(dest) as staging:
        n_tasks, refused = write_tasks((item.task for item in adapter.items(source, limit)), staging, source)
    return AdaptedBenchmark(dest, name or dest.name, n_tasks, kind, refused)
