"""The demo Benchmark (examples/demo-bench) through Amber's own trial runner.

Oracle must score 1 and nop 0 on every Task, with no Trial Errored: that is
what makes the demo a sanity check of the whole Trial path (snapshot, sandbox,
Harbor's Trial, Verifier, records). The Benchmark Version id is a content hash
that must not depend on mtimes or non-executable mode bits, and must change
with an executable bit or a byte.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from amber_pipeline.agents import catalog as agents
from amber_pipeline.benchmarks import tasks as benchmark
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
    cell = Cell(benchmark_version_id=bv.id, agent=agent, agent_spec_id=agents.get(agent).spec_id,
                model_configuration=NO_MODEL)
    run = trial_runner.CellRun(job_id=f"test-demo-{agent}", cell=cell, benchmark=bv, trials_per_task=1,
                               run_dir=tmp_path / "run", workspace="test")
    records = trial_runner.run_cell(run, concurrency=2)

    assert sorted(r.task_name for r in records) == sorted(t.name for t in bv.tasks)
    problems = [(r.task_name, r.reward, r.error_type, r.error_message) for r in records
                if r.errored or r.reward != expected]
    assert problems == [], f"{agent} should score {expected} on every Task"
    for r in records:
        assert r.benchmark_version_id == bv.id
        assert r.cell_key == cell.key
        assert r.image_id is not None and r.image_id.startswith("sha256:")
        assert r.duration_sec > 0


# ---- the Benchmark Version id ---------------------------------------------------------


def _copy_with_other_metadata(src: Path, dst: Path) -> Path:
    """A copy with other mtimes and other non-executable mode bits (0o600 instead of 0o644)."""
    shutil.copytree(src, dst)
    changed = 0
    for p in sorted(dst.rglob("*")):
        os.utime(p, (1_000_000_000, 1_000_000_000))
        if p.is_file():
            mode = p.stat().st_mode
            new = (0o700 if mode & stat.S_IXUSR else 0o600)
            if stat.S_IMODE(mode) != new:
                changed += 1
            p.chmod(new)
    assert changed > 0, "the copy should really differ in mode bits"
    return dst


def test_benchmark_version_id_is_stable(tmp_path, demo_version):
    store = tmp_path / "store"
    first = benchmark.snapshot(DEMO, store)
    second = benchmark.snapshot(DEMO, store)
    assert first.id == second.id == demo_version.id
    assert len(first.id) == 64

    copy = _copy_with_other_metadata(DEMO, tmp_path / "elsewhere" / "renamed-bench")
    # and the source tree's own modes are the ordinary ones: 0o644 for data files
    assert any(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in DEMO.rglob("*") if p.is_file())
    assert benchmark.snapshot(copy, tmp_path / "other-store").id == first.id


def test_benchmark_version_id_changes_with_an_executable_bit_or_a_byte(tmp_path, demo_version):
    copy = tmp_path / "bench"
    shutil.copytree(DEMO, copy)
    assert benchmark.snapshot(copy, tmp_path / "s0").id == demo_version.id

    instruction = sorted(copy.glob("*/instruction.md"))[0]
    instruction.chmod(0o755)
    flipped = benchmark.snapshot(copy, tmp_path / "s1").id
    assert flipped != demo_version.id
    instruction.chmod(0o644)
    assert benchmark.snapshot(copy, tmp_path / "s2").id == demo_version.id

    script = sorted(copy.glob("*/tests/test.sh"))[0]
    assert script.stat().st_mode & stat.S_IXUSR
    script.chmod(0o644)
    assert benchmark.snapshot(copy, tmp_path / "s3").id not in (demo_version.id, flipped)
    script.chmod(0o755)

    data = instruction.read_bytes()
    instruction.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert benchmark.snapshot(copy, tmp_path / "s4").id not in (demo_version.id, flipped)
    instruction.write_bytes(data)
    assert benchmark.snapshot(copy, tmp_path / "s5").id == demo_version.id
