"""How much a Trial through Amber costs over the bare container lifecycle.

Runs N nop Trials of a trivial Task through Amber (`trial_runner.run_cell`,
concurrency 1: Harbor's Trial on AmberSandbox, records included) and, in the
same process and in turns with them, the same container lifecycle done
directly with the Docker SDK: create and start a container from the same image
with `sleep infinity`, put the Task's tests in, exec the test script, read the
reward file, remove it by force. Both are warmed up first (the image is built
before anything is timed). Taking turns, both sides see the same load of the
machine however it drifts, which other users of the engine make it do.

Then throughput: T nop Trials through Amber (`run_cell` of one Task with T
Trials per Task) at concurrency 1, 2 and 4, against T direct lifecycles run by
as many threads, each timed from first start to last finish.

The lines that start with FIGURE are for machines: `FIGURE <name> <value> <unit>`.
`--smoke` is a small run for the test suite: --n 1, no warm-up (the image is built by the first Trial), and at
each concurrency as many Trials as it runs at once.

    .venv/bin/python bench/trial_overhead.py [--n 10] [--trials 40] [--concurrency 1,2,4] [--quick] [--smoke]
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from amber_pipeline.agents.specs import agent_spec
from amber_pipeline.benchmarks import versions as benchmark
from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.jobs import trial_runner
from amber_pipeline.sandbox import docker_engine
from amber_pipeline.sandbox import environment as sandbox
from amber_pipeline.warehouse.schemas import TrialRecord

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


def run_nop_cell(bv: benchmark.BenchmarkVersion, n: int, run_dir: Path, concurrency: int = 1,
                 on_trial_done: Callable[[TrialRecord], None] | None = None) -> float:
    """n nop Trials of the Task through run_cell, all checked to score 0; the wall time of the cell run."""
    cell = Cell(bv.id, "nop", agent_spec("nop").spec_id, NO_MODEL)
    run = trial_runner.CellRun(job_id=f"bench-{uuid.uuid4().hex[:8]}", cell=cell, benchmark=bv,
                               trials_per_task=n, run_dir=run_dir, workspace="bench")
    t0 = time.perf_counter()
    records = trial_runner.run_cell(run, concurrency=concurrency, on_trial_done=on_trial_done).records
    elapsed = time.perf_counter() - t0
    bad = [(r.trial_name, r.reward, r.error_type, r.error_message) for r in records if r.errored or r.reward != 0.0]
    if bad or len(records) != n:
        raise SystemExit(f"nop Trials did not all score 0 ({len(records)} of {n} ran): {bad}")
    return elapsed


def latencies(bv: benchmark.BenchmarkVersion, client, tag: str, n: int,
              run_dir: Path) -> tuple[list[float], list[float]]:
    """Wall times of n nop Trials run one after the other by run_cell and of n direct lifecycles, in turns: a
    direct one runs as each Trial ends (on_trial_done holds the next Trial back until it returns), on the image
    tagged ``tag`` (built by then: a Trial builds it). The first Trial's time includes run_cell's setup, as a cell
    run's does."""
    amber: list[float] = []
    direct: list[float] = []
    resumed = [time.perf_counter()]

    def in_between(_record: TrialRecord) -> None:
        amber.append(time.perf_counter() - resumed[0])
        direct.append(direct_trial(client, client.images.get(tag).id))  # looked up before its clock starts
        resumed[0] = time.perf_counter()

    run_nop_cell(bv, n, run_dir, on_trial_done=in_between)
    return amber, direct


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def direct_trial(client, image_id: str) -> float:
    """The same lifecycle with the Docker SDK alone; its wall time."""
    t0 = time.perf_counter()
    c = client.containers.run(image_id, ["sleep", "infinity"], detach=True, init=True, network_mode="none",
                              nano_cpus=10**9, mem_limit="512m", memswap_limit="512m",
                              labels={"org.amber.bench": "trial-overhead"})
    try:
        c.put_archive("/", _tar({"tests/test.sh": TEST_SH.encode()}))
        code, _ = c.exec_run(["bash", "/tests/test.sh"])
        stream, _ = c.get_archive("/logs/verifier/reward.txt")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            assert member is not None, "reward.txt is not a file"
            reward = float(member.read())
        if code != 0 or reward != 0.0:
            raise SystemExit(f"direct lifecycle: test.sh exited {code}, reward {reward}")
    finally:
        c.remove(force=True)
    return time.perf_counter() - t0


def direct_trials(client, image_id: str, n: int, concurrency: int = 1) -> list[float]:
    """n direct lifecycles run by `concurrency` threads; the wall time of each."""
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda _: direct_trial(client, image_id), range(n)))


def per_minute(n: int, seconds: float) -> float:
    return 60 * n / seconds


def amber_throughput(bv: benchmark.BenchmarkVersion, n: int, run_dir: Path, concurrency: int) -> float:
    """nop Trials per minute through run_cell at a concurrency."""
    return per_minute(n, run_nop_cell(bv, n, run_dir, concurrency))


def direct_throughput(client, image_id: str, n: int, concurrency: int) -> float:
    t0 = time.perf_counter()
    direct_trials(client, image_id, n, concurrency)
    return per_minute(n, time.perf_counter() - t0)


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.9 * len(s)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10, help="Trials on each side for the latencies (default 10)")
    parser.add_argument("--trials", type=int, default=40, help="Trials on each side per concurrency (default 40)")
    parser.add_argument("--concurrency", default="1,2,4", help="concurrencies for throughput (default 1,2,4)")
    parser.add_argument("--quick", action="store_true", help="a short run: --n 5 --trials 12")
    parser.add_argument("--smoke", action="store_true", help="a shorter run, for the test suite: --n 1, no warm-up, "
                        "as many Trials as the concurrency")
    args = parser.parse_args()
    if args.quick:
        args.n, args.trials = 5, 12
    if args.smoke:
        args.n = 1
    concurrencies = [int(c) for c in args.concurrency.split(",") if c]
    trials = {c: c if args.smoke else args.trials for c in concurrencies}  # at smoke size, each slot busy once
    client = docker_engine.connect()
    with tempfile.TemporaryDirectory(prefix="amber-bench-") as tmp:
        root = Path(tmp)
        bv = benchmark.snapshot(make_benchmark(root), root / "store", name="trial-overhead")
        tag = sandbox.image_tag(bv.task_path(bv.tasks[0]) / "environment")
        if not args.smoke:  # warm up: builds the image, imports Harbor, and runs each path once
            run_nop_cell(bv, 1, root / "warmup")
            direct_trial(client, client.images.get(tag).id)

        amber, direct = latencies(bv, client, tag, args.n, root / "run")
        image_id = client.images.get(tag).id
        throughput = {c: (amber_throughput(bv, trials[c], root / f"c{c}", c),
                          direct_throughput(client, image_id, trials[c], c)) for c in concurrencies}

    print_latencies(amber, direct, args.n, image_id)
    print_throughput(throughput, trials)


def print_latencies(amber: list[float], direct: list[float], n: int, image_id: str) -> None:
    a_med, d_med = statistics.median(amber), statistics.median(direct)
    print(f"nop Trials of a trivial Task, n={n} each, in turns, concurrency 1, image {image_id[7:19]}")
    print(f"{'':28}{'median s':>10}{'p90 s':>10}{'min s':>10}{'max s':>10}")
    for label, xs in (("Amber (run_cell, Harbor)", amber), ("Docker SDK directly", direct)):
        print(f"{label:28}{statistics.median(xs):10.3f}{p90(xs):10.3f}{min(xs):10.3f}{max(xs):10.3f}")
    print(f"ratio of medians (Amber / direct): {a_med / d_med:.2f}x; "
          f"overhead per Trial: {a_med - d_med:.3f} s (median)")
    print(f"ratio of p90s: {p90(amber) / p90(direct):.2f}x")
    print(f"FIGURE nop_trial_ratio {a_med / d_med:.3f} x")


def print_throughput(throughput: dict[int, tuple[float, float]], trials: dict[int, int]) -> None:
    print()
    each = (f"{next(iter(trials.values()))} nop Trials" if len(set(trials.values())) == 1
            else "as many nop Trials as the concurrency")
    print(f"Throughput: {each} on each side per concurrency, Trials per minute")
    print(f"{'concurrency':>12}{'Amber':>10}{'direct':>10}{'Amber/direct':>14}")
    for c, (amber, direct) in throughput.items():
        print(f"{c:>12}{amber:10.1f}{direct:10.1f}{amber / direct:14.2f}")
    for c, (amber, direct) in throughput.items():
        print(f"FIGURE trials_per_minute_c{c} {amber:.1f} trials/min")
        print(f"FIGURE direct_trials_per_minute_c{c} {direct:.1f} trials/min")


if __name__ == "__main__":
    main()
