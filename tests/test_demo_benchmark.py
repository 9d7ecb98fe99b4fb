"""The demo Benchmark (examples/demo-bench) through Amber's own trial runner.

Oracle must score 1 and nop 0 on every Task, with no Trial Errored: that is
what makes the demo a sanity check of the whole Trial path (snapshot, sandbox,
Harbor's Trial, Verifier, records).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from amber_pipeline.agents.specs import agent_spec
from amber_pipeline.benchmarks import versions as benchmark
from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.jobs import trial_runner

pytestmark = pytest.mark.docker

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo-bench"
BASE_IMAGE = "amber-base:bookworm"


@pytest.fixture(scope="module")
def docker_ready():
    from amber_pipeline.errors import AmberError
    from amber_pipeline.sandbox import docker_engine

    try:
        docker_engine.connect(timeout=30).images.get(BASE_IMAGE)
    except AmberError as e:
        pytest.skip(str(e))
    except Exception as e:  # noqa: BLE001 - the base image is missing
        pytest.skip(f"{BASE_IMAGE} is not available: {e}")


@pytest.fixture(scope="module")
def demo_version(tmp_path_factory) -> benchmark.BenchmarkVersion:
    return benchmark.snapshot(DEMO, tmp_path_factory.mktemp("store"), name="demo-bench")


@pytest.mark.parametrize("agent,expected", [("oracle", 1.0), ("nop", 0.0)])
def test_demo_benchmark_oracle_scores_1_and_nop_0(docker_ready, demo_version, tmp_path, agent, expected):
    bv = demo_version
    assert len(bv.tasks) >= 8
    cell = Cell(benchmark_version_id=bv.id, agent=agent, agent_spec_id=agent_spec(agent).spec_id,
                model_configuration=NO_MODEL)
    run = trial_runner.CellRun(job_id=f"test-demo-{agent}", cell=cell, benchmark=bv, trials_per_task=1,
                               run_dir=tmp_path / "run", workspace="test")
    records = trial_runner.run_cell(run, concurrency=2).records

    assert sorted(r.task_name for r in records) == sorted(t.name for t in bv.tasks)
    problems = [(r.task_name, r.reward, r.error_type, r.error_message) for r in records
                if r.errored or r.reward != expected]
    assert problems == [], f"{agent} should score {expected} on every Task"
    for r in records:
        assert r.benchmark_version_id == bv.id
        assert r.cell_key == cell.key
        assert r.image_id is not None and r.image_id.startswith("sha256:")
        assert r.duration_sec > 0
