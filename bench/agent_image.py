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

    .venv/bin/python bench/agent_image.py
"""

from __future__ import annotations

import time
from pathlib import Path

from amber_pipeline.agents.catalog import AGENTS
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.sandbox import agent_image, docker_engine
from amber_pipeline.sandbox.environment import image_tag

TASK = PROJECT_ROOT / "examples" / "demo-bench" / "count-log-errors"


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


def main() -> None:
    client = docker_engine.connect()
    before = replaced_images(client)
    base = task_image(client)
    started = time.perf_counter()
    agent_image._runtime_image(client, fresh=True)
    runtime = time.perf_counter() - started
    print(f"runtime (Node.js 24, Python venv), cold: {runtime:.1f} s")
    cold, cached = {}, {}
    for spec in (a for a in AGENTS.values() if a.software is not None):
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
