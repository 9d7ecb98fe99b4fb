"""The benches run at a small size in the suite, so none can rot: each prints its FIGURE lines, as named.

Every script of bench/ (but synthetic.py, what they share) runs here as a user would run it, with `--smoke`, in a
process of its own with a deadline: it must exit 0 and print each FIGURE line it is documented to print, with a
number. A few figures are also checked for sense where a wrong one would show a broken bench.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from amber_pipeline.paths import PROJECT_ROOT

FIGURE = re.compile(r"^FIGURE (\S+) (-?[0-9.]+) (\S+)$", re.MULTILINE)
BENCH = PROJECT_ROOT / "bench"


@dataclass(frozen=True)
class Bench:
    script: str
    figures: frozenset[str]  # every FIGURE name it prints at its smoke size
    timeout: float  # seconds: a smoke run takes a minute at most, here; this is for a machine under load
    sane: Callable[[dict[str, float]], bool] = lambda found: True


def _quotes_held(found: dict[str, float]) -> bool:
    # A Benchmark never seen is never stopped at its ceiling, and every ratio is a real one. (A cell of the demo
    # may spend a little past its own share: a Job's reservations are one pool; the bench prints that goal.)
    return (0 < found["quote_accuracy_unseen_min"] <= found["quote_accuracy_unseen_max"] < 1.0
            and 0 < found["quote_accuracy_min"] <= found["quote_accuracy_max"])


def _positive(*names: str) -> Callable[[dict[str, float]], bool]:
    return lambda found: all(found[n] > 0 for n in names)


def _api_held(found: dict[str, float]) -> bool:
    # Both catalogs answered, every answer was the record asked for and every Wallet its ledger's sum (a fuzz
    # failure fails the bench itself).
    return (_positive("api_requests_per_s", "api_requests_per_s_duckdb", "api_vs_inprocess_ratio",
                      "api_fuzz_cases")(found) and found["api_errors"] == 0 and found["api_ledger_mismatches"] == 0)


BENCHES = [
    Bench("aggregate_scale.py", frozenset({"reaggregate_seconds", "reaggregate_peak_rss_mb", "plain_groupby_seconds",
                                           "reaggregate_vs_groupby_ratio"}), 300,
          _positive("reaggregate_seconds", "reaggregate_peak_rss_mb", "plain_groupby_seconds")),
    Bench("api_load.py", frozenset({"api_requests_per_s", "api_p99_ms", "api_requests_per_s_duckdb",
                                    "api_p99_ms_duckdb", "api_errors", "api_ledger_mismatches",
                                    "api_vs_inprocess_ratio", "api_fuzz_cases"}), 600, _api_held),
    Bench("cli_start.py", frozenset({"cli_help_seconds", "cli_job_status_seconds", "cli_wallet_seconds",
                                      "cli_job_status_job_seconds"}), 300,
          _positive("cli_help_seconds", "cli_job_status_seconds", "cli_wallet_seconds", "cli_job_status_job_seconds")),
    Bench("job_scores.py", frozenset({"job_scores_seconds"}), 300, _positive("job_scores_seconds")),
    Bench("proxy_overhead.py", frozenset({"proxy_added_ms_median"}), 300),  # a difference of medians: may be < 0
    Bench("quote_speed.py", frozenset({"quote_seconds", "quote_1000_tasks_seconds"}), 300,
          _positive("quote_seconds", "quote_1000_tasks_seconds")),
    Bench("sequential.py", frozenset({"sequential_type1_rate", "sequential_trials_share_20pt", "sequential_coverage"}),
          300),  # shares: 0 is a fine type-I rate
    Bench("sql_confinement.py", frozenset({"sql_confined_trials_seconds", "sql_confined_trials_ratio",
                                           "sql_confined_ledger_seconds", "sql_confined_ledger_ratio"}), 300,
          _positive("sql_confined_trials_ratio", "sql_confined_ledger_ratio")),
    Bench("static_throughput.py", frozenset({"static_tasks_per_second", "static_peak_rss_mb", "static_e2e_seconds",
                                             "static_e2e_tasks_per_second"}), 300,
          _positive("static_tasks_per_second", "static_peak_rss_mb", "static_e2e_seconds",
                    "static_e2e_tasks_per_second")),
    Bench("upload_check.py", frozenset({"upload_check_seconds", "upload_check_peak_rss_mb"}), 300,
          _positive("upload_check_seconds", "upload_check_peak_rss_mb")),
    # in Docker sandboxes, or Docker images
    Bench("agent_image.py", frozenset({"agent_runtime_cold_s", "agent_layer_cold_s_max", "agent_layer_cached_s_max"}),
          600, _positive("agent_layer_cold_s_max")),
    Bench("quote_accuracy.py", frozenset({"quote_accuracy_unseen_min", "quote_accuracy_unseen_max",
                                          "quote_accuracy_min", "quote_accuracy_max"}), 900, _quotes_held),
    Bench("request_latency.py", frozenset({"request_to_trial_median_s", "request_to_trial_p90_s",
                                           "request_to_trial_cli_median_s", "request_to_trial_cli_p90_s",
                                           "request_to_trial_ui_median_s", "request_to_trial_ui_p90_s",
                                           "ui_quote_median_s", "ui_request_to_trial_median_s",
                                           "ui_pricings_per_launch"}), 900,
          lambda found: (_positive("request_to_trial_median_s", "ui_quote_median_s",
                                   "ui_request_to_trial_median_s")(found)
                         and found["ui_pricings_per_launch"] == 1)),  # the Quote shown is the one started
    Bench("scale_out.py", frozenset({"pg_wallet_writes_per_s", "duckdb_wallet_writes_per_s", "pg_wallet_writes_ratio",
                                     "two_engine_trials_seconds_one", "two_engine_trials_seconds_two",
                                     "two_engine_trials_ratio"}), 900,
          _positive("pg_wallet_writes_per_s", "duckdb_wallet_writes_per_s", "two_engine_trials_ratio")),
    Bench("trial_overhead.py", frozenset({"nop_trial_ratio", *(f"{side}trials_per_minute_c{c}"
                                                               for side in ("", "direct_") for c in (1, 2, 4))}), 600,
          _positive("nop_trial_ratio", "trials_per_minute_c1", "direct_trials_per_minute_c1")),
    Bench("web_pages.py", frozenset({"web_job_page_ms_p95", "web_trial_page_ms_p95"}), 300,
          _positive("web_job_page_ms_p95", "web_trial_page_ms_p95")),
]
DOCKER = {"agent_image.py", "quote_accuracy.py", "request_latency.py", "scale_out.py", "trial_overhead.py"}
DAGSTER_UI = {"request_latency.py"}  # `amber ui`: a webserver, a daemon and a warm worker
BROWSER = {"web_pages.py"}  # Debian's headless Chromium
SLOW = {"api_load.py", "quote_accuracy.py", "request_latency.py", "scale_out.py",
        "static_throughput.py"}  # half a minute or more, even at --smoke


def _marks(script: str) -> list[pytest.MarkDecorator]:
    return [mark for names, mark in ((DOCKER, pytest.mark.docker), (DAGSTER_UI, pytest.mark.dagster_ui),
                                     (BROWSER, pytest.mark.browser), (SLOW, pytest.mark.slow)) if script in names]


def figures(script: str, *args: str, timeout: float, home: Path) -> dict[str, float]:
    """Run `bench/SCRIPT ARGS` as a user would, within ``timeout`` seconds; its FIGURE lines by name. A bench that
    uses no scratch home of its own gets ``home``, never the developer's. One that runs over is interrupted, so
    that its own cleanup stops the servers and engines it started, then killed with what it started."""
    env = {**os.environ, "AMBER_HOME": str(home)}
    with subprocess.Popen([sys.executable, str(BENCH / script), *args], cwd=PROJECT_ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True) as bench:
        try:
            out, err = bench.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            bench.send_signal(signal.SIGINT)
            try:
                out, err = bench.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(bench.pid, signal.SIGKILL)  # its own session: the bench and what it started
                out, err = bench.communicate()
            pytest.fail(f"bench/{script} {' '.join(args)} ran over {timeout:.0f} s:\n{out[-3000:]}{err[-3000:]}")
    assert bench.returncode == 0, out[-3000:] + err[-3000:]
    return {name: float(value) for name, value, _ in FIGURE.findall(out)}


def test_every_bench_is_run_here() -> None:
    scripts = {p.name for p in BENCH.glob("*.py")} - {"synthetic.py"}
    assert scripts == {b.script for b in BENCHES}, "a bench with no smoke run here, or a smoke run with no bench"
    for script in scripts:
        assert "--smoke" in (BENCH / script).read_text(), f"bench/{script} has no --smoke"


@pytest.mark.parametrize("bench", [pytest.param(b, id=b.script.removesuffix(".py"), marks=_marks(b.script))
                                   for b in BENCHES])
def test_bench_prints_its_figures(bench: Bench, tmp_path: Path) -> None:
    if bench.script == "scale_out.py" and os.geteuid() != 0:
        pytest.skip("A second Docker engine needs root.")
    found = figures(bench.script, "--smoke", timeout=bench.timeout, home=tmp_path / "amber")
    assert set(found) == bench.figures, found
    assert all(math.isfinite(v) for v in found.values()), found
    assert bench.sane(found), found
