"""Benchmark Versions of Tasks from outside: Harbor's registry, and published datasets through static adapters.

A registry dataset becomes a public Version labelled as Harbor names it
(`terminal-bench@2.0`): its Tasks are fetched at their pinned commits
(`harbor_registry.fetch_dataset`, cached under AMBER_HOME/cache), copied into
the content-addressed store and registered; importing the same dataset again
returns the same Version. An adapted dataset (`adapters`) becomes a Version
named by the user, `NAME@N` (a sharded one two: `NAME-sharded@N` and
`NAME-concat@N`, with the same Task names). Who may make a public Version
(Amber staff) is the caller's rule.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from amber_pipeline.benchmarks import adapters, harbor_registry, registry
from amber_pipeline.benchmarks.versions import BenchmarkVersion
from amber_pipeline.warehouse.catalog import Warehouse


@contextlib.contextmanager
def _scratch(wh: Warehouse) -> Iterator[Path]:
    """A scratch folder on the store's file system, removed whatever happens."""
    wh.paths.cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".work-", dir=wh.paths.cache))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def import_dataset(wh: Warehouse, source: str, ref: str) -> tuple[BenchmarkVersion, str]:
    """The public Version of dataset ``ref`` (``name@version`` or ``name``) of the registry at ``source``."""
    spec = harbor_registry.find_dataset(harbor_registry.load_registry(source), ref)
    with _scratch(wh) as work:
        dest = harbor_registry.fetch_dataset(spec, wh.paths.cache, work / spec.name)
        return registry.register(wh, dest, registry.PUBLIC, name=spec.name, label=harbor_registry.label_of(spec),
                                 origin="registry")


def adapt_dataset(wh: Warehouse, owner: str, kind: str, source: Path, name: str, *, limit: int | None = None,
                  shards: Path | None = None) -> list[tuple[BenchmarkVersion, str, adapters.AdaptedBenchmark]]:
    """Versions of a dataset file through its static adapter: one, or for ``sharded`` (the base dataset's kind
    ``kind`` with a ``shards`` file) the sharded one and its concat control."""
    registry.check_name(name)
    with _scratch(wh) as work:
        if shards is not None:
            made = list(adapters.adapt_sharded(kind, source, shards, work / name, name=name))
        else:
            made = [adapters.adapt(kind, source, work / name, limit=limit, name=name)]
        out = []
        for adapted in made:
            version, label = registry.register(wh, adapted.root, owner, name=registry.check_name(adapted.name),
                                               origin="adapter")
            out.append((version, label, adapted))
        return out
