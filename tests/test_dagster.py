"""Tests of Amber's Dagster layer: definitions, the Job sensor, a real cell run, and warehouse locking.

Everything is real: a Dagster test instance, a warehouse in a temporary AMBER_HOME, Docker sandboxes for
the cell run, and separate OS processes for the locking test. Nothing is mocked.
"""

from __future__ import annotations

import shutil
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from helpers import funded, race, request, submit

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.cells import cell_file_id
from amber_pipeline.definitions import defs
from amber_pipeline.jobs import cell_names, lifecycle, records
from amber_pipeline.money.prices import show
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from assets.cell_job import CELL_AGGREGATES, CELL_TAG, JOB_TAG, REWARDS, cell_scores, cells, trials
from assets.comparisons import comparisons
from assets.resources import WarehouseResource
from sensors.started_jobs import job_request_sensor

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
        for job in ("submit_job", "continue_job", "start_quote"):
            assert defs.resolve_job_def(job).description, job
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


def names(wh: Warehouse, job_id: str) -> dict[str, str]:
    """Cell key -> name of a Job's cells."""
    return cell_names.read(wh, [c.cell_key for c in records.cells_of(wh, job_id)])


def test_sensor_turns_started_jobs_into_cell_runs_once(warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    # Nothing started: skip.
    assert isinstance(job_request_sensor(sensor_context(instance, None)), dg.SkipReason)

    job = submit(warehouse, str(DEMO_BENCH), "oracle", [], 1, bounds=True)
    named = names(warehouse, job.id)
    assert len(named) >= 2  # oracle and nop (oracle is its own upper bound)
    label = records.get_job(warehouse, job.id, None).benchmark_label
    assert set(named.values()) == {f"{label}/oracle", f"{label}/nop"}  # names people can read

    result = job_request_sensor(sensor_context(instance, None))
    assert isinstance(result, dg.SensorResult)
    assert sorted(r.partition_key for r in result.run_requests) == sorted(named.values())
    assert {r.run_key for r in result.run_requests} == {f"{job.id}:{cell_file_id(k)}" for k in named}
    assert {(r.tags[JOB_TAG], r.tags[CELL_TAG], r.partition_key) for r in result.run_requests} == {
        (job.id, key, name) for key, name in named.items()}
    [add] = result.dynamic_partitions_requests
    assert isinstance(add, dg.AddDynamicPartitionsRequest)
    assert add.partitions_def_name == "cells"
    assert sorted(add.partition_keys) == sorted(named.values())

    # The cells are claimed: the next tick has nothing to do.
    assert isinstance(job_request_sensor(sensor_context(instance, None)), dg.SkipReason)

    # A second Job over the same cells, seen by a validated tick as the daemon runs it: new run keys, no adds.
    instance.add_dynamic_partitions("cells", list(add.partition_keys))
    job2 = submit(warehouse, str(DEMO_BENCH), "oracle", [], 1, bounds=True)
    assert names(warehouse, job2.id) == named  # a cell keeps its name
    with tick_context(instance, None) as ctx:
        data = job_request_sensor.evaluate_tick(ctx)
    assert {r.run_key for r in data.run_requests} == {f"{job2.id}:{cell_file_id(k)}" for k in named}
    assert not data.dynamic_partitions_requests
    for r in data.run_requests:
        assert r.tags["dagster/partition"] == r.partition_key
        assert r.tags["dagster/sensor_name"] == "job_request_sensor"
        assert r.tags[JOB_TAG] == job2.id


def test_a_cell_claimed_by_the_warm_worker_is_not_launched_again(warehouse: Warehouse,
                                                                 instance: dg.DagsterInstance) -> None:
    """The warm worker and the sensor claim from the same cells: whoever claims first launches it."""
    funded(warehouse)
    quoted = lifecycle.quote(warehouse, "default", local_user(), request(str(DEMO_BENCH), "nop"))
    assert records.claim_cells(warehouse) == []  # quoted, not started: nothing to launch
    lifecycle.start(warehouse, "default", quoted.id)
    [claimed] = records.claim_cells(warehouse, quoted.job_id)
    assert records.claim_cells(warehouse, quoted.job_id) == []
    assert isinstance(job_request_sensor(sensor_context(instance, None)), dg.SkipReason)

    # A claim whose run never appeared (its launcher died) is asked again after a minute, and only then.
    with warehouse.write() as con:
        con.execute("update job_cells set launched_at = now() - interval 2 minute where job_id = ?",
                    [quoted.job_id])
    result = job_request_sensor(sensor_context(instance, None))
    assert isinstance(result, dg.SensorResult)
    assert [(r.run_key, r.partition_key) for r in result.run_requests] == [(claimed.run_key, claimed.cell_name)]

    # With its run in the instance, it is left alone.
    instance.create_run_for_job(defs.resolve_job_def("cell_job"), tags={JOB_TAG: claimed.job_id,
                                                                        CELL_TAG: claimed.cell_key})
    assert isinstance(job_request_sensor(sensor_context(instance, None)), dg.SkipReason)


def test_cell_names_stay_readable_and_unique(warehouse: Warehouse) -> None:
    from amber_pipeline.cells import Cell

    with warehouse.write() as con:
        a = Cell("a" * 64, "terminus-2", "1111aaaa", "replay-strong@0123456789ab")
        b = Cell("a" * 64, "terminus-2", "2222bbbb", "replay-strong@0123456789ab")  # another Agent Version
        c = Cell("b" * 64, "terminus-2", "1111aaaa", "replay-strong@0123456789ab")  # another owner's bench@1
        d = Cell("c" * 64, "terminus-2", "1111aaaa", "replay-strong@0123456789ab")  # and a third's
        nop = Cell("a" * 64, "nop", "3333cccc", "none")
        cell_names.assign(con, [a, b, c, d, nop], "bench@1")
        cell_names.assign(con, [a], "bench@1")  # again: unchanged
        got = cell_names.of(con, [a.key, b.key, c.key, d.key, nop.key])
    assert got == {a.key: "bench@1/terminus-2/replay-strong",
                   b.key: "bench@1/terminus-2@2222bbbb/replay-strong@01234567",
                   c.key: "bench@1/terminus-2@1111aaaa/replay-strong@01234567",
                   d.key: "bench@1#cccccccccccc/terminus-2@1111aaaa/replay-strong@01234567",
                   nop.key: "bench@1/nop"}
    assert cell_names.key_of(warehouse, "bench@1/nop") == nop.key
    assert cell_names.key_of(warehouse, nop.key) == nop.key  # a key is its own name


# ---- 3. one cell materialized for real ----------------------------------------------------------------------

@pytest.mark.docker
def test_cell_runs_for_real(tmp_path: Path, warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    bench = small_bench(tmp_path)
    expected = {"nop": 0.0, "oracle": 1.0}
    submitted = {agent: submit(warehouse, str(bench), agent, [], 1, bounds=False) for agent in expected}
    label = records.get_job(warehouse, submitted["nop"].id, None).benchmark_label

    for i, (agent, job) in enumerate(submitted.items()):
        [cell] = records.cells_of(warehouse, job.id)
        [name] = names(warehouse, job.id).values()
        instance.add_dynamic_partitions("cells", [name])
        result = dg.materialize([trials, cell_scores], partition_key=name,
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
        # The table of every cell of the Benchmark Version so far, this one marked, each with its CI.
        table = {r.data["cell"]: r.data for r in metadata["cells"].records}
        assert set(table) == {f"{label}/{a}" for a in list(expected)[:i + 1]}, table
        assert table[name]["this"] and table[name]["mean_reward"] == expected[agent]
        assert table[name]["ci95"] == f"[{expected[agent]:.3f}, {expected[agent]:.3f}]"
        assert table[name]["trials"] == 2 and table[name]["workspace"] == "default"
        assert metadata["plot"].value.startswith("![forest plot](data:image/png;base64,")
        # The Benchmark Version's comparisons are recorded as refreshed as the cell finishes.
        latest = instance.get_latest_materialization_event(dg.AssetKey("comparisons"))
        assert latest is not None and latest.run_id == result.run_id

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
    from amber_pipeline.accounts.identity import local_user
    from amber_pipeline.paths import AmberPaths
    from amber_pipeline.warehouse.catalog import Warehouse

    bench, seconds = sys.argv[1], float(sys.argv[2])
    wh = Warehouse(AmberPaths.from_env())
    print("ready", flush=True)
    sys.stdin.readline()  # wait for "go", so all workers contend at once
    counts = {"submitted": 0, "queries": 0, "claims": 0, "claimed": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lifecycle.submit(wh, "default", local_user(), JobRequest(benchmark=bench, agent="nop"))
        counts["submitted"] += 1
        with wh.query() as con:
            con.execute("select count(*) from jobs j join job_cells c on c.job_id = j.id").fetchone()
            con.execute("select count(*) from trials").fetchone()
        counts["queries"] += 1
        counts["claimed"] += len(records.claim_cells(wh))  # as the sensor and the warm worker do, all at once
        counts["claims"] += 1
    print(json.dumps(counts), flush=True)
""")


def test_warehouse_locking_never_fails_across_processes(tmp_path: Path, warehouse: Warehouse) -> None:
    bench = small_bench(tmp_path, TWO_TASKS[:1])
    submit(warehouse, str(bench), "nop", [], 1, bounds=False)  # register the Benchmark Version once
    counts = race(LOCK_WORKER, [[str(bench), "5"]] * 3)
    submitted = 1 + sum(c["submitted"] for c in counts)
    assert all(c["submitted"] > 0 and c["queries"] > 0 and c["claims"] > 0 for c in counts), counts
    assert len(records.list_jobs(warehouse, "default")) == submitted
    # Every Job's one cell was claimed exactly once, by whichever process asked first.
    assert sum(c["claimed"] for c in counts) + len(records.claim_cells(warehouse)) == submitted
    with warehouse.query() as con:
        assert con.execute("select count(*) from jobs").fetchone()[0] == submitted
        seqs = [r[0] for r in con.execute("select seq from jobs order by seq").fetchall()]
    assert len(set(seqs)) == submitted


# ---- 6. submit_job shows the Quote, start_quote starts the Job ---------------------------------------------------

def quote_shown(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    """What a submit_job or continue_job run showed: its step's output metadata, as the run's page shows it."""
    [output] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT]
    assert output.event_specific_data.step_output_handle.output_name == "quote"
    return {k: getattr(v, "value", v) for k, v in output.event_specific_data.metadata.items()}


def start_quote(instance: dg.DagsterInstance, quote_id: str) -> dg.ExecuteInProcessResult:
    return defs.resolve_job_def("start_quote").execute_in_process(
        run_config={"ops": {"confirm_quote": {"config": {"quote_id": quote_id}}}}, instance=instance)


def reservations(wh: Warehouse) -> list[tuple[str, Decimal]]:
    with wh.query("default") as con:
        return con.execute("select quote_id, amount from ledger where kind = 'reservation' order by seq").fetchall()


def test_submit_job_shows_the_quote_and_start_quote_reserves_what_it_showed(
        tmp_path: Path, warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    funded(warehouse)
    bench = small_bench(tmp_path)
    submit_job = defs.resolve_job_def("submit_job")
    assert [node.name for node in submit_job.nodes] == ["quote_job"]  # pricing is all it does
    config = {"benchmark": str(bench), "agent": "nop", "bounds": True, "workspace": "default"}

    quoted = submit_job.execute_in_process(run_config={"ops": {"quote_job": {"config": config}}},
                                           instance=instance)
    assert quoted.success
    assert records.list_jobs(warehouse, "default") == []  # nothing reserved or started
    assert reservations(warehouse) == []
    shown = quote_shown(quoted)
    rows = {r.data["cell"]: r.data for r in shown["cells"].records}
    assert set(rows) == {"nop", "oracle"} and all(r["tasks"] == 2 for r in rows.values())
    assert shown["estimate_usd"].startswith("$")
    assert shown["ceiling_usd"] == shown["estimate_usd"]  # no ceiling asked: the estimate is what it reserves
    assert "Tasks this Job" in shown["detectable_change"]
    quote_id = shown["quote_id"]
    assert quote_id.startswith("job-")  # the Job's id to be
    assert instance.get_run_by_id(quoted.run_id).tags[JOB_TAG] == quote_id  # the Job's runs, filterable
    assert f"launch start_quote with quote_id {quote_id}" in shown["next_step"]

    started = start_quote(instance, quote_id)
    assert started.success
    [job] = records.list_jobs(warehouse, "default")
    assert job.id == quote_id and job.status == "running"
    assert started.output_for_node("confirm_quote") == job.id
    assert instance.get_run_by_id(started.run_id).tags[JOB_TAG] == job.id
    # What was shown is what was reserved.
    [(_, amount)] = reservations(warehouse)
    assert shown["estimate_usd"] == show(amount) and Decimal(shown["quote"]["reserves"]) == amount


# ---- 7. continue_job: a Job past its ceiling, from the UI ---------------------------------------------------------

def test_continue_job_shows_the_missing_trials_and_start_quote_reserves_them_and_queues_their_cell_runs(
        tmp_path: Path, warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    """What `amber job continue` does, launched from the Dagster UI in two steps: continue_job prices a cancelled
    Job's missing Trials, reserving nothing; start_quote reserves them, runs the Job again, and queues its
    cells' runs at once under new run keys. A Job that completed is refused."""
    funded(warehouse)
    made, job = lifecycle.submit(warehouse, "default", local_user(), request(str(small_bench(tmp_path)), "nop"))
    lifecycle.cancel(warehouse, "default", job.id)
    before = reservations(warehouse)
    continue_job = defs.resolve_job_def("continue_job")
    priced = continue_job.execute_in_process(
        run_config={"ops": {"quote_continuation": {"config": {"workspace": "default", "job_id": job.id}}}},
        instance=instance)
    assert priced.success
    shown = quote_shown(priced)
    quote_id = shown["quote_id"]
    assert quote_id.startswith("quote-") and shown["job"] == job.id
    assert instance.get_run_by_id(priced.run_id).tags[JOB_TAG] == job.id
    # Shown, not reserved: the Job stays cancelled and no cell run is queued.
    assert records.get_job(warehouse, job.id, "default").status == "cancelled"
    assert reservations(warehouse) == before
    assert instance.get_runs(dg.RunsFilter(job_name="cell_job")) == []

    ran = start_quote(instance, quote_id)
    assert ran.success and ran.output_for_node("confirm_quote") == job.id
    assert records.get_job(warehouse, job.id, "default").status == "running"
    assert instance.get_run_by_id(ran.run_id).tags[JOB_TAG] == job.id
    [cell] = records.cells_of(warehouse, job.id)
    # No warm worker runs here to take start_quote's ask, so the sensor's next tick makes the cell's run.
    asked = job_request_sensor(sensor_context(instance, None))
    assert isinstance(asked, dg.SensorResult)
    assert [r.run_key for r in asked.run_requests] == [f"{job.id}:{cell_file_id(cell.cell_key)}:r1"]
    # What was shown is what was reserved, under the Quote's id.
    assert reservations(warehouse)[len(before):] == [(quote_id, Decimal(shown["quote"]["reserves"]))]
    assert shown["ceiling_usd"] == show(made.amount)
    with warehouse.query("default") as con:
        reserved = con.execute("select reserved from job_spending where job_id = ?", [job.id]).fetchone()[0]
    assert reserved == 2 * made.amount  # the Quote's, released at the cancel, and the same Trials again

    with warehouse.write() as con:
        lifecycle.transition(con, job.id, "cancelled")
        lifecycle.transition(con, job.id, "running")
        lifecycle.transition(con, job.id, "completed")
    refused = continue_job.execute_in_process(
        run_config={"ops": {"quote_continuation": {"config": {"workspace": "default", "job_id": job.id}}}},
        instance=instance, raise_on_error=False)
    assert not refused.success
    [failure] = [e for e in refused.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.event_specific_data.user_failure_data.description.startswith(f"Job {job.id} is completed")
