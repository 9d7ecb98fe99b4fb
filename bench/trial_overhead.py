"""How much a Trial through Amber costs over the bare container lifecycle.

Runs N nop Trials of a trivial Task through Amber (`trial_runner.run_cell`,
concurrency 1: Harbor's Trial on AmberSandbox, records included) and, in the
same process, the same container lifecycle done directly with the Docker SDK:
create and start a container from the same image with `sleep infinity`, put
the Task's tests in, exec the test script, read the reward file, remove it by
force. Both are warmed up first (the image is built before anything is timed).

    .venv/bin/python bench/trial_overhead.py [--n 10]
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

from amber_pipeline.agents.catalog import agent_spec
from amber_pipeline.benchmarks import versions as benchmark
from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.jobs import trial_runner
from amber_pipeline.sandbox import docker_engine
from amber_pipeline.sandbox import environment as sandbox

TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if [ -f /app/done ]; then printf 1 > /logs/verifier/reward.txt; else printf 0 > /logs/verifier/reward.txt; fi
"""


def make_benchmark(root: Path) -> Path:
    task = root / "bench" / "trivial"
    for d in ("environment", "tests", "solution"):
        (task / d).mkdir(parents=True)
    (task / "task.toml").write_text('version = "1.0"\n\n[agent]\ntimeout_sec = 60.0\n\n[verifier]\n'
                                    'timeout_sec = 60.0\n\n[environment]\ncpus = 1\nmemory_mb = 512\n')
    (task / "instruction.md").write_text("Create /app/done.\n")
    (task / "environment" / "Dockerfile").write_text("FROM amber-base:bookworm\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntouch /app/done\n")
    for rel in ("tests/test.sh", "solution/solve.sh"):
        (task / rel).chmod(0o755)
    return root / "bench"


def amber_trials(bv: benchmark.BenchmarkVersion, n: int, run_dir: Path) -> list[float]:
    """Wall time of each of n nop Trials run one after the other by run_cell."""
    cell = Cell(bv.id, "nop", agent_spec("nop").spec_id, NO_MODEL)
    run = trial_runner.CellRun(job_id=f"bench-{uuid.uuid4().hex[:8]}", cell=cell, benchmark=bv,
                               trials_per_task=n, run_dir=run_dir, workspace="bench")
    marks = [time.perf_counter()]
    records = trial_runner.run_cell(run, concurrency=1,
                                    on_trial_done=lambda r: marks.append(time.perf_counter())).records
    bad = [(r.trial_name, r.reward, r.error_type, r.error_message) for r in records if r.errored or r.reward != 0.0]
    if bad:
        raise SystemExit(f"nop Trials did not all score 0: {bad}")
    return [b - a for a, b in zip(marks, marks[1:], strict=False)]


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def direct_trials(client, image_id: str, n: int) -> list[float]:
    """The same lifecycle with the Docker SDK alone."""
    tests = _tar({"tests/test.sh": TEST_SH.encode()})
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        c = client.containers.run(image_id, ["sleep", "infinity"], detach=True, init=True, network_mode="none",
                                  nano_cpus=10**9, mem_limit="512m", memswap_limit="512m",
                                  labels={"org.amber.bench": "trial-overhead"})
        try:
            c.put_archive("/", tests)
            code, _ = c.exec_run(["bash", "/tests/test.sh"])
            stream, _ = c.get_archive("/logs/verifier/reward.txt")
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                reward = float(tar.extractfile(tar.getmembers()[0]).read())
            if code != 0 or reward != 0.0:
                raise SystemExit(f"direct lifecycle: test.sh exited {code}, reward {reward}")
        finally:
            c.remove(force=True)
        times.append(time.perf_counter() - t0)
    return times


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.9 * len(s)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10, help="Trials on each side (default 10)")
    args = parser.parse_args()
    client = docker_engine.connect()
    with tempfile.TemporaryDirectory(prefix="amber-bench-") as tmp:
        root = Path(tmp)
        bv = benchmark.snapshot(make_benchmark(root), root / "store", name="trial-overhead")
        # warm up: builds the image, imports Harbor, and runs each path once
        amber_trials(bv, 1, root / "warmup")
        image_id = client.images.get(sandbox.image_tag(bv.task_path(bv.tasks[0]) / "environment")).id
        direct_trials(client, image_id, 1)

        amber = amber_trials(bv, args.n, root / "run")
        direct = direct_trials(client, image_id, args.n)

    a_med, d_med = statistics.median(amber), statistics.median(direct)
    print(f"nop Trials of a trivial Task, n={args.n} each, concurrency 1, image {image_id[7:19]}")
    print(f"{'':28}{'median s':>10}{'p90 s':>10}{'min s':>10}{'max s':>10}")
    for label, xs in (("Amber (run_cell, Harbor)", amber), ("Docker SDK directly", direct)):
        print(f"{label:28}{statistics.median(xs):10.3f}{p90(xs):10.3f}{min(xs):10.3f}{max(xs):10.3f}")
    print(f"ratio of medians (Amber / direct): {a_med / d_med:.2f}x; "
          f"overhead per Trial: {a_med - d_med:.3f} s (median)")
    print(f"ratio of p90s: {p90(amber) / p90(direct):.2f}x")


if __name__ == "__main__":
    main()
