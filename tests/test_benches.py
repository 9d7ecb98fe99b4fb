"""The benches run at a small size in the suite, so none can rot: each prints its FIGURE lines, as named."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from amber_pipeline.paths import PROJECT_ROOT

FIGURE = re.compile(r"^FIGURE (\S+) (-?[0-9.]+) (\S+)$", re.MULTILINE)


def figures(script: str, *args: str, timeout: float = 900) -> dict[str, float]:
    """Run `bench/SCRIPT ARGS` as a user would; its FIGURE lines by name."""
    done = subprocess.run([sys.executable, str(PROJECT_ROOT / "bench" / script), *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {name: float(value) for name, value, _ in FIGURE.findall(done.stdout)}


@pytest.mark.docker
def test_quote_accuracy_prints_its_figures() -> None:
    found = figures("quote_accuracy.py", "--smoke")
    assert set(found) == {"quote_accuracy_unseen_min", "quote_accuracy_unseen_max", "quote_accuracy_min",
                          "quote_accuracy_max"}, found
    # A Benchmark never seen is never stopped at its ceiling, and every ratio is a real one.
    assert 0 < found["quote_accuracy_unseen_min"] <= found["quote_accuracy_unseen_max"] < 1.0, found
    assert 0 < found["quote_accuracy_min"] <= found["quote_accuracy_max"] <= 1.0, found


def test_api_load_prints_its_figures_and_its_fuzz_finds_nothing() -> None:
    found = figures("api_load.py", "--smoke")  # a fuzz failure fails the bench
    assert {"api_requests_per_s", "api_p99_ms", "api_vs_inprocess_ratio", "api_fuzz_cases"} == set(found), found
    assert found["api_fuzz_cases"] > 0 and all(v >= 0 for v in found.values()), found
