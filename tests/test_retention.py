"""Transcript expiry with an injected clock: transcripts go after 90 days, Rewards and costs stay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse import retention
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)


def trial(tmp_path: Path, name: str, finished: datetime) -> TrialRecord:
    folder = tmp_path / "runs" / name
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "trajectory.json").write_text('{"steps": ["the agent said things"]}')
    (folder / "trial.log").write_text("log line\n")
    (folder / "verifier").mkdir()
    (folder / "verifier" / "reward.txt").write_text("1\n")
    (folder / "result.json").write_text("{}")
    return TrialRecord(workspace="w", job_id="job-x", cell_key="bv=x|agent=nop@1|mc=none", benchmark_version_id="x",
                       task_name=name, attempt=1, trial_name=name, agent="nop", agent_version="v",
                       model_configuration="none", outcome="scored", reward=1.0, errored=False, retries=0,
                       error_type=None, error_message=None, input_tokens=0, output_tokens=0, cost_usd=0.01,
                       started_at=finished, finished_at=finished, duration_sec=1.0, image_id=None,
                       trial_dir=str(folder))


def test_transcripts_older_than_90_days_go_and_results_stay(tmp_path: Path) -> None:
    wh = Warehouse(AmberPaths(tmp_path / "home"))
    old = trial(tmp_path, "old", NOW - timedelta(days=91))
    edge = trial(tmp_path, "edge", NOW - timedelta(days=89, hours=23))
    wh.write_parquet(trials_table([old, edge]), wh.trials_file("cell", "job-x"))

    expired = retention.expire_transcripts(wh, NOW)
    assert [Path(e.trial_dir).name for e in expired] == ["old"]
    assert expired[0].bytes_freed == len('{"steps": ["the agent said things"]}') + len("log line\n")
    old_dir, edge_dir = Path(old.trial_dir), Path(edge.trial_dir)
    assert not (old_dir / "agent").exists() and not (old_dir / "trial.log").exists()
    assert (old_dir / "verifier" / "reward.txt").exists() and (old_dir / "result.json").exists()
    assert (old_dir / retention.MARKER).exists()
    assert (edge_dir / "agent" / "trajectory.json").exists()
    # Idempotent: a second pass finds nothing new; the Rewards and costs are still queryable.
    assert retention.expire_transcripts(wh, NOW) == []
    with wh.query() as con:
        assert con.execute("select count(*), sum(reward), sum(cost_usd) from trials").fetchone() == (2, 2.0, 0.02)
    with wh.read() as con:
        assert con.execute("select trial_dir from transcript_expiries").fetchall() == [(str(old_dir),)]
    # A day later the edge case expires too.
    assert [Path(e.trial_dir).name for e in retention.expire_transcripts(wh, NOW + timedelta(days=1))] == ["edge"]


def test_the_daily_schedule_expires_by_its_scheduled_time_and_shows_what_went(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from amber_pipeline.definitions import defs
    from assets.resources import WarehouseResource
    from assets.schedules import transcript_expiry_schedule

    monkeypatch.setenv("AMBER_HOME", str(tmp_path / "home"))
    wh = Warehouse(AmberPaths.from_env())
    old = trial(tmp_path, "old", NOW - timedelta(days=100))
    wh.write_parquet(trials_table([old]), wh.trials_file("cell", "job-x"))
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=NOW)
        [request] = transcript_expiry_schedule.evaluate_tick(context).run_requests or []
        job = defs.resolve_job_def("transcript_expiry_job")
        result = job.execute_in_process(instance=instance, resources={"warehouse": WarehouseResource()},
                                        tags={**request.tags, ".dagster/scheduled_execution_time": NOW.isoformat()})
    assert result.success
    [event] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = event.event_specific_data.metadata
    assert metadata["expired"].value == 1
    assert old.trial_dir in metadata["transcripts"].value
    assert not (Path(old.trial_dir) / "agent").exists()
