"""The benchmark_versions asset: one partition per published Benchmark Version, keyed ``owner/label``.

A Version is made outside Dagster (by `amber benchmark publish`, a registry
import, an adapter, or a Job over a folder), in the catalog. A sensor
reports each new one as a materialization of its partition
(`sensors/benchmark_versions.py`), with its label, hash, owner, Task count
and origin, so the UI's asset page lists every Version and when it appeared. The key carries the owner because private
labels of two Workspaces may be the same.
"""

import dagster as dg

from amber_pipeline.benchmarks import registry

VERSIONS = "benchmark_versions"
versions = dg.DynamicPartitionsDefinition(name=VERSIONS)
benchmark_versions = dg.AssetSpec(
    VERSIONS, partitions_def=versions, group_name="benchmarks",
    description="Published Benchmark Versions: immutable, content-addressed snapshots of Tasks, one partition each "
                "(owner/label).")


def partition_key(v: registry.Listed) -> str:
    return f"{v.owner}/{v.label}"

