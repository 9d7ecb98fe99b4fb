"""Tests of Amber's Dagster layer: definitions, the Job sensor, a real cell run, and warehouse locking.

Everything is real: a Dagster test instance, a warehouse in a temporary AMBER_HOME, Docker sandboxes for
the cell run, and separate OS processes for the locking test. Nothing is mocked.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import dagster as dg
import pytest
from helpers import funded, race, request, submit

from amber_pipeline.cells import cell_file_id
from amber_pipeline.definitions import defs
from amber_pipeline.jobs import lifecycle, records
from amber_pipeline.money.identity import local_user
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from assets.cells import CELL_AGGREGATES, JOB_TAG, REWARDS, cell_scores, cells, trials
from assets.comparisons import comparisons
from assets.resources import WarehouseResource
from sensors.job_requests import job_request_sensor

DEMO_BENCH = PROJECT_ROOT / "examples" / "demo-bench"
TWO_TASKS = ("fix-off-by-one", "ini-port-change")


@pytest.fixture
def instance(amber_home: Path):
    with dg.instance_for_test() as inst:
        yield inst


def small_bench(tmp_path: Path, tasks: tuple[str, ...] = TWO_TASKS) -> Path:
    bench = tmp_path / "mini-bench"
    for name in tasks:
        shutil.copytree(DEMO_BENCH / name, bench / name)
    return bench


# ---- 1. definitions ----------------------------------------------------------------------------------------

def test_definitions_load_with_cell_partitions_and_descriptions(amber_home: Path) -> None:
    with dg.instance_for_test():
        dg.Definitions.validate_loadable(defs)
        graph = defs.resolve_asset_graph()
        for key in (trials.key, REWARDS.key, CELL_AGGREGATES.key):
            node = graph.get(key)
            assert node.partitions_def == cells, key
            assert isinstance(node.partitions_def, dg.DynamicPartitionsDefinition)
            assert node.partitions_def.name == "cells"
            assert node.description and node.description.strip(), key
        assert defs.resolve_job_def("cell_job").partitions_def == cells
        assert defs.resolve_job_def("submit_job") is not None
        assert defs.resolve_sensor_def("job_request_sensor").job_name == "cell_job"


# ---- 2. the sensor -----------------------------------------------------------------------------------------

def sensor_context(instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorEvaluationContext:
    """A context for calling the sensor function directly: its raw result, no validation."""
    return dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                   resources={"warehouse": WarehouseResource()})


def tick_context(instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorEvaluationContext:
    """A context as the daemon's code server builds it (instance ref, the repository's top-level resources),
    for `evaluate_tick`, which validates partition keys and adds Dagster's tags.

    Use it in a `with` block: it opens its own DagsterInstance from the ref, which sets Dagster's current
    DefsStateStorage (a ContextVar). Left to the garbage collector, its exit resets that ContextVar at a
    random later moment to this test's instance, and a later test's definitions load then fails with
    `sqlite3.OperationalError: unable to open database file` on the deleted instance directory."""
    return dg.build_sensor_context(instance_ref=instance.get_ref(), cursor=cursor, definitions=defs,
                                   resources={"warehouse": WarehouseResource()})


def start_seq(wh: Warehouse, job_id: str) -> str:
    """A Job's place in start order, as the sensor's cursor holds it."""
    with wh.read() as con:
        row = con.execute("select start_seq from jobs where id = ?", [job_id]).fetchone()
    assert row is not None and row[0] is not None
    return str(row[0])


def test_sensor_turns_new_jobs_into_cell_runs(warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    # First tick, nothing submitted: skip, cursor unchanged.
    ctx = sensor_context(instance, None)
    result = job_request_sensor(ctx)
    assert isinstance(result, dg.SkipReason)
    assert ctx.cursor is None

    job = submit(warehouse, str(DEMO_BENCH), "oracle", [], 1, bounds=True)
    keys = sorted(c.cell_key for c in records.cells_of(warehouse, job.id))
    assert len(keys) >= 2  # oracle and nop (oracle is its own upper bound)

    result = job_request_sensor(sensor_context(instance, None))
    assert isinstance(result, dg.SensorResult)
    assert sorted(r.partition_key for r in result.run_requests) == keys
    assert {r.run_key for r in result.run_requests} == {f"{job.id}:{cell_file_id(k)}" for k in keys}
    assert all(r.tags[JOB_TAG] == job.id for r in result.run_requests)
    [add] = result.dynamic_partitions_requests
    assert isinstance(add, dg.AddDynamicPartitionsRequest)
    assert add.partitions_def_name == "cells"
    assert sorted(add.partition_keys) == keys
    assert result.cursor == start_seq(warehouse, job.id)

    # What the daemon does: apply the adds, then evaluate a validated tick.
    instance.add_dynamic_partitions("cells", list(add.partition_keys))
    with tick_context(instance, None) as ctx:
        data = job_request_sensor.evaluate_tick(ctx)
    assert data.cursor == start_seq(warehouse, job.id)
    assert sorted(r.partition_key for r in data.run_requests) == keys
    for r in data.run_requests:
        assert r.tags["dagster/partition"] == r.partition_key
        assert r.tags["dagster/sensor_name"] == "job_request_sensor"
        assert r.tags[JOB_TAG] == job.id

    # Next tick from that cursor, nothing new: skip.
    with tick_context(instance, start_seq(warehouse, job.id)) as ctx:
        data = job_request_sensor.evaluate_tick(ctx)
    assert not data.run_requests
    assert data.skip_message and f"#{start_seq(warehouse, job.id)}" in data.skip_message
    assert data.cursor == start_seq(warehouse, job.id)  # unchanged

    # A second Job over the same cells: new runs (new run keys), no partition adds.
    job2 = submit(warehouse, str(DEMO_BENCH), "oracle", [], 1, bounds=True)
    assert sorted(c.cell_key for c in records.cells_of(warehouse, job2.id)) == keys
    result = job_request_sensor(sensor_context(instance, start_seq(warehouse, job.id)))
    assert isinstance(result, dg.SensorResult)
    assert sorted(r.partition_key for r in result.run_requests) == keys
    assert {r.run_key for r in result.run_requests} == {f"{job2.id}:{cell_file_id(k)}" for k in keys}
    assert not result.dynamic_partitions_requests
    assert result.cursor == start_seq(warehouse, job2.id)
    with tick_context(instance, start_seq(warehouse, job.id)) as ctx:
        data = job_request_sensor.evaluate_tick(ctx)
    assert len(data.run_requests) == len(keys)
    assert not data.dynamic_partitions_requests
    assert data.cursor == start_seq(warehouse, job2.id)


def test_the_sensor_follows_start_order_not_quote_order(warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    """A Job quoted first but started last is still seen: the cursor is the start sequence."""
    funded(warehouse)
    early = lifecycle.quote(warehouse, "default", local_user(), request(str(DEMO_BENCH), "nop"))
    late = lifecycle.quote(warehouse, "default", local_user(), request(str(DEMO_BENCH), "oracle"))
    lifecycle.start(warehouse, "default", late.id)
    first = job_request_sensor(sensor_context(instance, None))
    assert isinstance(first, dg.SensorResult)
    assert {r.tags[JOB_TAG] for r in first.run_requests} == {late.job_id}
    assert first.cursor == start_seq(warehouse, late.job_id)

    lifecycle.start(warehouse, "default", early.id)  # quoted before `late`, started after it
    second = job_request_sensor(sensor_context(instance, first.cursor))
    assert isinstance(second, dg.SensorResult)
    assert {r.tags[JOB_TAG] for r in second.run_requests} == {early.job_id}
    assert int(second.cursor or 0) > int(first.cursor or 0)
    assert isinstance(job_request_sensor(sensor_context(instance, second.cursor)), dg.SkipReason)


# ---- 3. one cell materialized for real ----------------------------------------------------------------------

@pytest.mark.docker
def test_cell_runs_for_real(tmp_path: Path, warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    bench = small_bench(tmp_path)
    expected = {"nop": 0.0, "oracle": 1.0}
    submitted = {agent: submit(warehouse, str(bench), agent, [], 1, bounds=False) for agent in expected}

    for agent, job in submitted.items():
        [cell] = records.cells_of(warehouse, job.id)
        instance.add_dynamic_partitions("cells", [cell.cell_key])
        result = dg.materialize([trials, cell_scores], partition_key=cell.cell_key,
                                instance=instance, resources={"warehouse": WarehouseResource()},
                                tags={JOB_TAG: job.id})
        assert result.success, agent

        fid = cell_file_id(cell.cell_key)
        assert warehouse.trials_file(fid, job.id).is_file()
        assert warehouse.trials_file(fid, job.id) == warehouse.paths.trials / fid / f"{job.id}.parquet"
        assert warehouse.rewards_file(fid, "default").is_file()
        assert warehouse.aggregates_file(fid, "default").is_file()

        with warehouse.query() as con:
            assert con.execute("select count(*) from trials where job_id = ?", [job.id]).fetchone()[0] == 2
            assert con.execute("select count(*) from rewards where cell_key = ?",
                               [cell.cell_key]).fetchone()[0] == 2
            mean, n_trials = con.execute("select mean_reward, n_trials from cell_results where cell_key = ?",
                                         [cell.cell_key]).fetchone()
        assert (mean, n_trials) == (expected[agent], 2), agent
        assert records.get_job(warehouse, job.id, None).status == "completed"
        assert [c.status for c in records.cells_of(warehouse, job.id)] == ["done"]

        [mat] = [m for m in result.get_asset_materialization_events()
                 if m.asset_key == CELL_AGGREGATES.key]
        metadata = mat.materialization.metadata
        assert metadata["mean_reward"].value == pytest.approx(expected[agent])
        assert metadata["workspaces"].value == 1
        assert "| default |" in metadata["cell_results"].value
        assert metadata["plot"].value.startswith("![forest plot](data:image/png;base64,")

    with warehouse.query() as con:
        assert con.execute("select count(*) from trials").fetchone()[0] == 4
        assert dict(con.execute("select agent, mean_reward from cell_results").fetchall()) == expected

    # The non-partitioned comparisons asset re-scores every cell; a second materialization changes nothing.
    for changed in (True, False):
        result = dg.materialize([comparisons], instance=instance, resources={"warehouse": WarehouseResource()})
        [mat] = result.get_asset_materialization_events()
        assert mat.materialization.metadata["changed"].value is changed
        assert mat.materialization.metadata["cells"].value == 2


# ---- 4. a cell run without a Job -----------------------------------------------------------------------------

def test_cell_run_without_job_tag_fails_with_advice(warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    job = submit(warehouse, str(DEMO_BENCH), "nop", [], 1, bounds=False)
    [cell] = records.cells_of(warehouse, job.id)
    instance.add_dynamic_partitions("cells", [cell.cell_key])
    result = defs.resolve_job_def("cell_job").execute_in_process(
        partition_key=cell.cell_key, instance=instance, raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_key == "trials"
    message = failure.step_failure_data.error.message
    assert "names no Job: submit Jobs with `amber job submit` or the submit_job job." in message
    assert records.get_job(warehouse, job.id, None).status == "running"  # nothing ran, nothing was marked


# ---- 5. warehouse locking across processes -------------------------------------------------------------------

LOCK_WORKER = textwrap.dedent("""
    import json, sys, time
    from amber_pipeline.jobs import lifecycle, records
    from amber_pipeline.jobs.request import JobRequest
    from amber_pipeline.money.identity import local_user
    from amber_pipeline.paths import AmberPaths
    from amber_pipeline.warehouse.catalog import Warehouse

    bench, seconds = sys.argv[1], float(sys.argv[2])
    wh = Warehouse(AmberPaths.from_env())
    print("ready", flush=True)
    sys.stdin.readline()  # wait for "go", so all workers contend at once
    counts = {"submitted": 0, "queries": 0, "sensor_reads": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lifecycle.submit(wh, "default", local_user(), JobRequest(benchmark=bench, agent="nop"))
        counts["submitted"] += 1
        with wh.query() as con:
            con.execute("select count(*) from jobs j join job_cells c on c.job_id = j.id").fetchone()
            con.execute("select count(*) from trials").fetchone()
        counts["queries"] += 1
        records.waiting_cells(wh, 0)
        counts["sensor_reads"] += 1
    print(json.dumps(counts), flush=True)
""")


def test_warehouse_locking_never_fails_across_processes(tmp_path: Path, warehouse: Warehouse) -> None:
    bench = small_bench(tmp_path, TWO_TASKS[:1])
    submit(warehouse, str(bench), "nop", [], 1, bounds=False)  # register the Benchmark Version once
    counts = race(LOCK_WORKER, [[str(bench), "5"]] * 3)
    submitted = 1 + sum(c["submitted"] for c in counts)
    assert all(c["submitted"] > 0 and c["queries"] > 0 and c["sensor_reads"] > 0 for c in counts), counts
    assert len(records.list_jobs(warehouse, "default")) == submitted
    assert len(records.waiting_cells(warehouse, 0)) == submitted
    with warehouse.query() as con:
        assert con.execute("select count(*) from jobs").fetchone()[0] == submitted
        seqs = [r[0] for r in con.execute("select seq from jobs order by seq").fetchall()]
    assert len(set(seqs)) == submitted
