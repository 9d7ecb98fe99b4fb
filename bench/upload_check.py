"""Upload check: how long a 1,000-Task upload takes to unpack and check, and how much memory it needs.

Builds (outside the timing) a .tar.gz of 1,000 Tasks of about 90 MB
compressed: each Task has task.toml, instruction.md, environment/Dockerfile
(FROM amber-base:bookworm), solution/solve.sh, tests/test.sh and two files of
random bytes, so the archive cannot compress and is near the 100 MB limit.
Then a FRESH child process does what `amber benchmark upload` does first:
unpack the archive safely (`archive.unpack`: both passes, every limit) and run
the per-Task checks (`checks.check_tasks`) on the unpacked Tasks. The figure is the child's
whole wall time (start-up and imports included); its peak RSS is the parent's
`RUSAGE_CHILDREN` maximum. Three children run one after the other; the time
is their median, the memory their maximum.

Goals: at most 10 s and 300 MB (for 1,000 Tasks). `--smoke` is a small run for
the test suite: 50 Tasks, one child.

    .venv/bin/python bench/upload_check.py [--tasks 1000] [--repeats 3] [--smoke] [--keep]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tarfile
import time
from io import BytesIO
from pathlib import Path

from synthetic import run_child, scratch_home

REPEATS = 3
BLOB = 44_500  # random bytes per data file; two per Task make the archive ~90 MB for 1,000 Tasks

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
t_import = time.perf_counter()
from amber_pipeline.benchmarks.intake.archive import unpack
from amber_pipeline.benchmarks.intake.checks import check_tasks
imports = time.perf_counter() - t_import
t0 = time.perf_counter()
got = unpack(Path(sys.argv[1]), Path(sys.argv[2]))
t_unpack = time.perf_counter() - t0
checks = check_tasks(got.root)
t_checks = time.perf_counter() - t0 - t_unpack
print(json.dumps({
    "imports": imports, "unpack": t_unpack, "checks": t_checks, "files": got.n_files, "bytes": got.n_bytes,
    "tasks": got.n_tasks, "checked": len(checks), "passed": sum(c.ok for c in checks),
    "failures": [f"{c.name}: {c.reason}" for c in checks if not c.ok][:3],
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

TASK_TOML = """version = "1.0"

[metadata]
difficulty = "easy"
category = "bench"

[agent]
timeout_sec = 120.0

[verifier]
timeout_sec = 60.0

[environment]
build_timeout_sec = 300.0
cpus = 1
memory_mb = 512
"""


def task_files(i: int) -> dict[str, tuple[bytes, int]]:
    """One Task's files (data, mode), its name `task-NNNN`."""
    name = f"task-{i:04d}"
    return {
        f"{name}/task.toml": (TASK_TOML.encode(), 0o644),
        f"{name}/instruction.md": (f"Write the checksum of /data/blob-0.bin to /app/out-{i}.txt.\n".encode(), 0o644),
        f"{name}/environment/Dockerfile": (b"FROM amber-base:bookworm\nCOPY data/ /data/\nWORKDIR /app\n", 0o644),
        f"{name}/environment/data/blob-0.bin": (os.urandom(BLOB), 0o644),
        f"{name}/environment/data/blob-1.bin": (os.urandom(BLOB), 0o644),
        f"{name}/solution/solve.sh": (f"#!/bin/bash\nsha256sum /data/blob-0.bin > /app/out-{i}.txt\n".encode(), 0o755),
        f"{name}/tests/test.sh": (f"#!/bin/bash\nmkdir -p /logs/verifier\ncd /data && sha256sum -c "
                                  f"/app/out-{i}.txt && echo 1 > /logs/verifier/reward.txt "
                                  f"|| echo 0 > /logs/verifier/reward.txt\n".encode(), 0o755),
    }


def build_archive(path: Path, n: int) -> None:
    """A .tar.gz of n Tasks in one folder, as `tar -czf` of a Benchmark folder would be."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tf:  # random data: level 1 compresses it no worse
        folder = tarfile.TarInfo("upload-bench")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tf.addfile(folder)
        for i in range(n):
            for name, (data, mode) in task_files(i).items():
                info = tarfile.TarInfo(f"upload-bench/{name}")
                info.size, info.mode, info.mtime = len(data), mode, time.time()
                tf.addfile(info, BytesIO(data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=REPEATS, help="children, one after the other (default 3)")
    parser.add_argument("--smoke", action="store_true", help="50 Tasks, one child (for the test suite)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.tasks, args.repeats = 50, 1
    with scratch_home("amber-bench-upload-", args.keep) as home:
        archive = home / "upload-bench.tar.gz"
        started = time.perf_counter()
        build_archive(archive, args.tasks)
        print(f"archive: {args.tasks} Tasks, {archive.stat().st_size / 1e6:.1f} MB compressed "
              f"({archive.stat().st_size / (1 << 20):.1f} MiB), built in {time.perf_counter() - started:.1f} s "
              "(not timed)")
        results = []
        for run in range(args.repeats):
            dest = home / "uploads" / f"run-{run}"
            dest.parent.mkdir(exist_ok=True)
            result = run_child(CHILD, [str(archive), str(dest)])
            shutil.rmtree(dest)
            checks = f"checks {result['checks']:.2f} s ({result['passed']} of {result['checked']} Tasks passed)"
            print(f"child: wall {result['wall']:.2f} s = imports {result['imports']:.2f} s, unpack "
                  f"{result['unpack']:.2f} s ({result['files']} files, {result['bytes'] / 1e6:.1f} MB, "
                  f"{result['tasks']} Tasks), {checks}; its own peak RSS {result['rss_mb']:.0f} MB")
            for failure in result["failures"]:
                print(f"  failed check: {failure}")
            results.append(result)
    seconds = statistics.median(r["wall"] for r in results)
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"FIGURE upload_check_seconds {seconds:.2f} s")
    print(f"FIGURE upload_check_peak_rss_mb {rss_mb:.0f} MB")
    print(f"goal at most 10 s and at most 300 MB: {'MET' if seconds <= 10 and rss_mb <= 300 else 'MISSED'}")


if __name__ == "__main__":
    main()
