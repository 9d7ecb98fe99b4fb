"""Agent images: how long an installed Agent's software takes to reach a Task's image, first and cached.

For each installed Agent (Claude Code, Codex CLI, pi, mini-swe-agent), on a
demo Task's image: the *cold* build, from nothing (Docker's build cache
unused, as on a bare machine: the Agent's software image, installed from its
registry, then its layer on the Task's image), and the *cached* one, what
every later Trial pays (both images found by their content hash). The shared
runtime (Node.js and Python's venv, built once for all four) is timed cold
first and reported on its own line. Cold builds download from the npm
registry and PyPI, so they vary with the network; the figures are one run's.

Goals (issue 9): cached at most 2 s.

`--smoke` is a run for the test suite that reaches no registry: instead of the
four Agents, one stand-in software image made from the base image alone (a
wrapper and a script, checked by running it; the build has no network), whose
cold build is the runtime's figure; then its layer on the Task's image, cold
and cached, as for an Agent. The stand-in and its layer are removed after.
Its figures say the bench still runs, not what an Agent's image costs.

    .venv/bin/python bench/agent_image.py [--smoke]
"""

from __future__ import annotations

import argparse
import io
import tarfile
import time
import uuid
from pathlib import Path

from amber_pipeline.agents.specs import AGENTS
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.sandbox import agent_image, docker_engine
from amber_pipeline.sandbox.task_image import image_tag

TASK = PROJECT_ROOT / "examples" / "demo-bench" / "count-log-errors"
SMOKE_AGENT = "bench-smoke"


def task_image(client) -> str:
    """The demo Task's own image (built here if it is not yet)."""
    tag = image_tag(Path(TASK / "environment"))
    try:
        return client.images.get(tag).id
    except Exception:  # noqa: BLE001 - not built yet
        image, _ = client.images.build(path=str(TASK / "environment"), tag=tag, rm=True, pull=False)
        return image.id


def replaced_images(client) -> set[str]:
    """Ids of the Agent images there are now, to remove those a fresh build leaves untagged."""
    return {i.id for i in client.images.list(filters={"label": agent_image.IMAGE_LABEL})}


def stand_in(client) -> str:
    """--smoke: a software image of the layout agent_layer copies (AGENT_ROOT/<agent> and the wrappers), made from
    the base image alone, from nothing and with no network; its tag."""
    folder = f"{agent_image.AGENT_ROOT}/{SMOKE_AGENT}"
    files = {
        "Dockerfile": (f"FROM {agent_image.BASE_IMAGE}\nCOPY agent/ {folder}/\nCOPY bin/ {agent_image.WRAPPERS}/\n"
                       f"RUN {agent_image.WRAPPERS}/{SMOKE_AGENT} --version\n").encode(),
        "agent/run.sh": b"#!/bin/sh\necho 'bench stand-in 1.0'\n",
        f"bin/{SMOKE_AGENT}": f'#!/bin/sh\nexec {folder}/run.sh "$@"\n'.encode(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644 if name == "Dockerfile" else 0o755
            tar.addfile(info, io.BytesIO(data))
    tag = f"amber-agent-software:{SMOKE_AGENT}-{uuid.uuid4().hex[:16]}"
    client.images.build(fileobj=io.BytesIO(buf.getvalue()), custom_context=True, tag=tag, rm=True, forcerm=True,
                        pull=False, nocache=True, network_mode="none",
                        labels={agent_image.IMAGE_LABEL: "amber-agent-software"})
    return tag


def smoke(client) -> None:
    """The bench's path with a stand-in for the Agents' software: no registry reached."""
    base = task_image(client)
    started = time.perf_counter()
    software = stand_in(client)
    runtime = time.perf_counter() - started
    layer = None
    try:
        started = time.perf_counter()
        layer = agent_image.agent_layer(client, base, software, fresh=True)
        cold = time.perf_counter() - started
        started = time.perf_counter()
        again = agent_image.agent_layer(client, base, software)
        cached = time.perf_counter() - started
        if again != layer:
            raise SystemExit(f"the cached layer {again} is not the one just built, {layer}")
    finally:
        for image in (layer, software):
            if image is not None:
                client.images.remove(image, force=True)
    print(f"smoke: a stand-in software image from {agent_image.BASE_IMAGE} alone (no registry), cold: "
          f"{runtime:.1f} s; its layer on the Task's image cold {cold:.1f} s, cached {cached:.3f} s (removed)")
    print(f"FIGURE agent_runtime_cold_s {runtime:.1f} s")
    print(f"FIGURE agent_layer_cold_s_max {cold:.1f} s")
    print(f"FIGURE agent_layer_cached_s_max {cached:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true",
                        help="a stand-in for the Agents' software, no registry reached (for the test suite)")
    args = parser.parse_args()
    client = docker_engine.connect()
    if args.smoke:
        smoke(client)
        return
    before = replaced_images(client)
    base = task_image(client)
    started = time.perf_counter()
    agent_image._runtime_image(client, fresh=True)
    runtime = time.perf_counter() - started
    print(f"runtime (Node.js 24, Python venv), cold: {runtime:.1f} s")
    cold, cached = {}, {}
    for spec in AGENTS.values():
        if spec.software is None:
            continue
        started = time.perf_counter()
        software = agent_image.software_image(client, spec.name, spec.software, fresh=True)
        built = time.perf_counter() - started
        agent_image.agent_layer(client, base, software, fresh=True)
        cold[spec.name] = time.perf_counter() - started
        started = time.perf_counter()
        agent_image.agent_layer(client, base, agent_image.software_image(client, spec.name, spec.software))
        cached[spec.name] = time.perf_counter() - started
        size = client.images.get(software).attrs["Size"] / 1e6
        print(f"{spec.name:15} cold {cold[spec.name]:6.1f} s (software image {built:5.1f} s, {size:5.0f} MB), "
              f"cached {cached[spec.name]:.3f} s")
    for image_id in before:  # the bench's fresh builds took their tags: drop them unless still in use
        try:
            if not client.images.get(image_id).tags:
                client.images.remove(image_id)
        except Exception:  # noqa: BLE001 - gone already, or a layer of another image
            pass
    print(f"FIGURE agent_runtime_cold_s {runtime:.1f} s")
    print(f"FIGURE agent_layer_cold_s_max {max(cold.values()):.1f} s")
    print(f"FIGURE agent_layer_cached_s_max {max(cached.values()):.3f} s")


if __name__ == "__main__":
    main()
