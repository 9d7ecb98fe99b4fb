"""Commands in a sandbox's container: `bash -c` through the engine's exec API, with the environment given.

- when a command times out or its phase is cancelled, its processes inside the container are killed, found by
  a marker in their environment (which every child inherits), so nothing of a timed-out phase keeps running;
- a timeout is known by our own clock, never inferred from exit code 124, which a user command may return on
  its own;
- Harbor's bookkeeping commands run as root are answered from stats (a HEAD request each, no process) when the
  files show they would change nothing (`rm -f --` of paths none of which is there, `chmod +x` of files
  everyone may already run): each process costs a round trip (`container_files`).
"""

from __future__ import annotations

import asyncio
import shlex
import uuid
from pathlib import PurePosixPath

import docker
from docker.errors import APIError, NotFound
from harbor.environments.base import ExecResult

from amber_pipeline.sandbox.container import SandboxContainer
from amber_pipeline.sandbox.container_files import ROOT, ContainerFiles, runnable_by_all

_KILL_GRACE_SEC = 10


class Commands:
    """The commands of one sandbox's container."""

    def __init__(self, client: docker.DockerClient, sandbox: SandboxContainer, files: ContainerFiles) -> None:
        self._client = client
        self._sandbox = sandbox
        self._files = files

    async def run(self, command: str, *, environment: dict[str, str] | None, workdir: str | None,
                  user: str | int | None, timeout_sec: int | None) -> ExecResult:
        """Run ``command`` with ``environment`` (and nothing else) in ``workdir`` as ``user`` (None: the image's
        user), killed after ``timeout_sec``."""
        container = self._sandbox.require()
        answer = await self._answer_from_files(command, user)
        if answer is not None:
            return answer
        await self._files.settled()
        marker = uuid.uuid4().hex
        marked = {**(environment or {}), "AMBER_EXEC_ID": marker}
        api = self._client.api
        exec_id = (await asyncio.to_thread(
            api.exec_create, container.id, ["bash", "-c", command], environment=marked, workdir=workdir,
            user="" if user is None else str(user)))["Id"]
        running = asyncio.ensure_future(asyncio.to_thread(_run_exec, api, exec_id))
        try:
            stdout, stderr, code = await asyncio.wait_for(asyncio.shield(running), timeout_sec)
        except (TimeoutError, asyncio.CancelledError) as stopped:
            await asyncio.shield(self._kill_marked(marker, running))
            if isinstance(stopped, asyncio.CancelledError):
                raise
            raise TimeoutError(f"Command timed out after {timeout_sec} s: {command[:200]}") from None
        return ExecResult(stdout=_text(stdout), stderr=_text(stderr), return_code=code)

    async def _kill_marked(self, marker: str, running: asyncio.Future) -> None:
        """Kill every process of one exec inside the container, then reap the exec stream."""
        script = (f"for p in /proc/[0-9]*; do grep -qzx 'AMBER_EXEC_ID={marker}' $p/environ 2>/dev/null "
                  "&& kill -9 ${p#/proc/} 2>/dev/null; done; true")
        container = self._sandbox.container
        if container is not None:
            try:
                await asyncio.to_thread(container.exec_run, ["bash", "-c", script], user="root")
            except (APIError, NotFound):
                pass  # the container is already gone, and its processes with it
        try:
            await asyncio.wait_for(running, _KILL_GRACE_SEC)
        except Exception:  # noqa: BLE001 - the stream of a killed command may end any way
            pass

    async def _answer_from_files(self, command: str, user: str | int | None) -> ExecResult | None:
        """What one of Harbor's bookkeeping commands would return, when the container's files show that it would
        change nothing; None when it must run. One stat per path instead of a process."""
        if not command.startswith(("rm -f -- ", "chmod +x ")) or user not in ROOT:
            return None
        words = _plain_words(command) or []
        paths = words[3:] if words[:3] == ["rm", "-f", "--"] else words[2:] if words[:2] == ["chmod", "+x"] else []
        if not paths or not all(PurePosixPath(p).is_absolute() for p in paths):
            return None
        stats = await asyncio.to_thread(self._files.stats, paths)
        if words[0] == "rm" and all(s is None for s in stats):
            return ExecResult(return_code=0)  # rm -f of nothing says nothing
        if words[0] == "chmod" and all(runnable_by_all(s) for s in stats):
            return ExecResult(return_code=0)
        return None


def _run_exec(api, exec_id: str) -> tuple[bytes | None, bytes | None, int]:
    """Start an exec and wait for its output, then its exit code: one thread for both."""
    stdout, stderr = api.exec_start(exec_id, demux=True)
    return stdout, stderr, api.exec_inspect(exec_id)["ExitCode"]


def _plain_words(command: str) -> list[str] | None:
    """A command's words when the shell would do nothing with it but split them (no expansion, no operator)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return words if shlex.join(words) == command else None


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")
