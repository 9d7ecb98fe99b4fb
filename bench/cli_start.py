"""How long a user waits for the CLI's quick commands, each from a fresh process as typed at a shell.

`amber --help`, and the read commands `amber job status`, `amber wallet` and `amber job status JOB` on the
embedded default with one Job of the static example. Goals (issue 30): `--help` within 0.3 s, every read
within 0.5 s. The figure is the median of N runs after one warm-up (the OS's file cache warm, as a second
command in a shell is). The baseline line is a bare interpreter's start, which no command can beat. `--smoke`
runs each command once, with no warm-up (for the test suite: the same commands, a cold figure).

    python bench/cli_start.py [--n 15] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AMBER = str(Path(sys.executable).parent / "amber")


def seconds(argv: list[str], env: dict[str, str], n: int, warm_ups: int) -> float:
    """The median wall time of ``argv`` over ``n`` runs, after ``warm_ups`` runs; a failure stops the bench."""
    times = []
    for i in range(n + warm_ups):
        began = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
        elapsed = time.perf_counter() - began
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()[-400:]}")
        if i >= warm_ups:
            times.append(elapsed)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="one run of each, no warm-up (for the test suite)")
    args = parser.parse_args()
    n, warm_ups = (1, 0) if args.smoke else (args.n, 1)
    with tempfile.TemporaryDirectory(prefix="amber-cli-start-") as tmp:
        env = {**{k: v for k, v in os.environ.items() if k not in ("AMBER_URL", "AMBER_TOKEN")},
               "AMBER_HOME": str(Path(tmp) / "amber"), "AMBER_CONFIG": str(Path(tmp) / "config.toml")}
        os.environ.update(env)
        from amber_pipeline.accounts import workspaces
        from amber_pipeline.accounts.identity import Actor, local_user
        from amber_pipeline.jobs import lifecycle
        from amber_pipeline.jobs.request import JobRequest
        from amber_pipeline.money import wallet
        from amber_pipeline.paths import AmberPaths
        from amber_pipeline.warehouse.catalog import Warehouse

        wh = Warehouse(AmberPaths.from_env())
        workspaces.create(wh, Actor(local_user(), "default"), "default")
        wallet.add_credit(wh, Actor(local_user(), "default"), "default", "10", "bench")
        _, job = lifecycle.submit(wh, "default", local_user(), JobRequest(
            benchmark=str(ROOT / "examples" / "static-bench"), agent="direct", model_configurations=["replay-strong"]))
        python = seconds([sys.executable, "-c", "pass"], env, n, warm_ups)
        print(f"baseline: a bare interpreter starts in {python:.3f} s")
        commands = {"cli_help_seconds": ["--help"], "cli_job_status_seconds": ["job", "status"],
                    "cli_wallet_seconds": ["wallet"], "cli_job_status_job_seconds": ["job", "status", job.id]}
        for name, argv in commands.items():
            print(f"FIGURE {name} {seconds([AMBER, *argv], env, n, warm_ups):.3f} s")


if __name__ == "__main__":
    main()
