"""The embedded Amber: a Dagster instance in AMBER_HOME whose daemon runs the sensor.

Started as plain processes (`dagster-daemon run`, or `dagster dev` for the UI)
with DAGSTER_HOME and AMBER_HOME set, so every cell run they launch sees the
same warehouse. This module spawns them; it never imports dagster.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from amber_pipeline.errors import AmberError
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths

WORKSPACE = PROJECT_ROOT / "workspace.yaml"


def environment(paths: AmberPaths) -> dict[str, str]:
    """The environment of the Dagster processes: the instance and warehouse of this AMBER_HOME."""
    paths.ensure()
    shutil.copyfile(PROJECT_ROOT / "dagster.yaml", paths.dagster_home / "dagster.yaml")
    return {**os.environ, "DAGSTER_HOME": str(paths.dagster_home), "AMBER_HOME": str(paths.home),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HARBOR_TELEMETRY": "off",
            "DAGSTER_DAEMON_HEARTBEAT_TOLERANCE": "60"}


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _pid_file(paths: AmberPaths) -> Path:
    return paths.dagster_home / "daemon.pid"


def daemon_pid(paths: AmberPaths) -> int | None:
    try:
        pid = int(_pid_file(paths).read_text())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None


def start_daemon(paths: AmberPaths) -> int:
    """Start the Dagster daemon in the background unless it already runs; return its pid."""
    pid = daemon_pid(paths)
    if pid is not None:
        return pid
    env = environment(paths)
    log = open(paths.dagster_home / "daemon.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([_bin("dagster-daemon"), "run", "-w", str(WORKSPACE)], cwd=PROJECT_ROOT,
                            env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    _pid_file(paths).write_text(str(proc.pid))
    time.sleep(1)
    if proc.poll() is not None:
        raise AmberError(f"The Dagster daemon stopped at once: see {paths.dagster_home / 'daemon.log'}.")
    return proc.pid


def stop_daemon(paths: AmberPaths) -> bool:
    pid = daemon_pid(paths)
    if pid is None:
        return False
    os.killpg(pid, signal.SIGTERM)
    for _ in range(100):
        if daemon_pid(paths) is None:
            break
        time.sleep(0.1)
    else:
        os.killpg(pid, signal.SIGKILL)
    _pid_file(paths).unlink(missing_ok=True)
    return True


def run_ui(paths: AmberPaths, host: str, port: int) -> int:
    """`dagster dev` (webserver and daemon) on the embedded instance, in the foreground."""
    stop_daemon(paths)  # one daemon per instance
    return subprocess.call([_bin("dagster"), "dev", "-w", str(WORKSPACE), "-h", host, "-p", str(port)],
                           cwd=PROJECT_ROOT, env=environment(paths))
