"""A Task's environment image, which its sandbox runs: tagged by the environment's content hash, built once.

A second Trial of the same environment finds its image built, and Trials that want the same image at once wait
for one build of it. An engine that lacks the Task's image builds it (its base images must be on that engine),
from a build context sent through the engine's API, so no path of the host that runs Amber is needed. A Task
with no Dockerfile names its image (`docker_image`), which must be on the engine already: no registry is asked.
An installed Agent's software goes on top as a layer of its own (`agent_image.agent_layer`).
"""

from __future__ import annotations

import threading
from pathlib import Path

import docker
from docker.errors import APIError, BuildError, ImageNotFound
from harbor.environments.base import SandboxBuildFailedError
from harbor.environments.definition import environment_content_hash

from amber_pipeline.sandbox.container import SANDBOX_LABEL

IMAGE_REPOSITORY = "amber-env"
_build_locks: dict[str, threading.Lock] = {}
_build_locks_guard = threading.Lock()


def image_tag(environment_dir: Path, docker_image: str | None = None) -> str:
    """The tag of a Task's environment image: its content hash."""
    if docker_image and not (environment_dir / "Dockerfile").is_file():
        return docker_image
    return f"{IMAGE_REPOSITORY}:{environment_content_hash(environment_dir, docker_image=docker_image)}"


def ensure_image(client: docker.DockerClient, tag: str, environment_dir: Path, environment_name: str,
                 force_build: bool) -> str:
    """The id of the image ``tag`` (`image_tag`) on the client's engine, built from ``environment_dir`` unless
    it is there already (or ``force_build``); raises SandboxBuildFailedError naming ``environment_name``."""
    with _build_lock(tag):
        if not force_build:
            try:
                return client.images.get(tag).id
            except ImageNotFound:
                pass
        if not (environment_dir / "Dockerfile").is_file():
            raise SandboxBuildFailedError(
                f"Image {tag} is not present locally and no registry is reachable: build it first.")
        try:
            image, _ = client.images.build(
                path=str(environment_dir), tag=tag, rm=True, forcerm=True, pull=False,
                labels={SANDBOX_LABEL: "environment"})
        except BuildError as e:
            tail = " | ".join(str(line.get("stream", line.get("error", ""))).strip()
                              for line in list(e.build_log)[-5:] if line)
            raise SandboxBuildFailedError(f"The environment of {environment_name} does not "
                                          f"build: {e.msg}. Last build output: {tail}") from None
        except APIError as e:
            raise SandboxBuildFailedError(f"The environment of {environment_name} does not "
                                          f"build: {e.explanation}") from None
        return image.id


def _build_lock(tag: str) -> threading.Lock:
    with _build_locks_guard:
        return _build_locks.setdefault(tag, threading.Lock())
