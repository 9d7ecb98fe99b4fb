"""benchmark_version_sensor: each newly published Benchmark Version becomes a materialization of its partition.

Publishing happens in the CLI, which never imports Dagster; within a tick
of it the Version shows on the benchmark_versions asset. A Version is new
when its partition does not exist yet, so a tick that failed is simply done
again by the next one.
"""

import dagster as dg

from amber_pipeline.benchmarks import registry
from assets.benchmark_versions import VERSIONS, partition_key, versions
from assets.resources import WarehouseResource


@dg.sensor(minimum_interval_seconds=10, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Records each newly published Benchmark Version as a materialization of benchmark_versions.")
def benchmark_version_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    known = set(context.instance.get_dynamic_partitions(VERSIONS))
    new = [v for v in registry.published(warehouse.get()) if partition_key(v) not in known]
    if not new:
        return dg.SkipReason("No Benchmark Version was published since the last tick.")
    return dg.SensorResult(
        dynamic_partitions_requests=[versions.build_add_request([partition_key(v) for v in new])],
        asset_events=[dg.AssetMaterialization(
            asset_key=VERSIONS, partition=partition_key(v),
            metadata={"label": v.label, "hash": v.id, "owner": v.owner, "tasks": v.n_tasks, "origin": v.origin,
                      "network allowlist": ", ".join(v.allowed_hosts) or "none"})
            for v in new])
