"""The Benchmark Version id: a content hash of the Tasks' paths, bytes and executable bits.

It must not depend on mtimes or other mode bits (a checkout elsewhere gives the
same id), and must change with an executable bit or a byte. No Docker needed.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from amber_pipeline.benchmarks import versions as benchmark

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo-bench"


@pytest.fixture(scope="module")
def demo_version(tmp_path_factory) -> benchmark.BenchmarkVersion:
    return benchmark.snapshot(DEMO, tmp_path_factory.mktemp("store"), name="demo-bench")


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
