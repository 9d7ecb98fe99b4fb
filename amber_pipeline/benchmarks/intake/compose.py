"""Compose: what a Task's environment/docker-compose.yaml may say, given that Amber never runs it.

Amber builds `environment/Dockerfile` itself and runs one container per Task,
so a compose file is ignored. Ignoring it is only honest when it says nothing
that matters: the `main` service as Harbor's own templates write it (build
context `${CONTEXT_DIR}`, `image: ${MAIN_IMAGE_NAME}`, cpus and memory from
`${CPUS}`/`${MEMORY}`, `network_mode: none`, Harbor's `${HOST_*_PATH}` log
mounts, a command or healthcheck...). Anything that would change what the
Task can reach or needs (other services, privileged mode, added capabilities,
devices, the host's network, pid or ipc namespace, host bind mounts) is
refused here, one rule per compose key, each ending the sentence `checks`
gives as the Task's reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from amber_pipeline.benchmarks.intake.task_refusals import Refused, table_at

COMPOSE_FILE = "docker-compose.yaml"

_HARBOR_MOUNT = re.compile(r"^\$\{?HOST_[A-Z_]+_PATH\}?$")
_HARBOR_CONTEXT = ("${CONTEXT_DIR}", "$CONTEXT_DIR")
_HARBOR_IMAGES = ("${MAIN_IMAGE_NAME}", "$MAIN_IMAGE_NAME", "${PREBUILT_IMAGE_NAME}", "$PREBUILT_IMAGE_NAME")
# What a compose file may say of `main` beyond the keys checked one by one below: all of it is either what
# Harbor's templates say or what Amber does anyway (cpus and memory come from task.toml), and none of it changes
# what the Task can reach.
_COMPOSE_IGNORED = frozenset({
    "command", "entrypoint", "environment", "working_dir", "healthcheck", "cpus", "mem_limit", "memswap_limit",
    "mem_reservation", "shm_size", "container_name", "hostname", "init", "tty", "stdin_open", "expose",
    "platform", "labels", "restart", "pull_policy", "stop_signal", "stop_grace_period", "ulimits", "user",
    "tmpfs", "pids_limit"})
_HOST_NAMESPACES = {"pid": "process", "ipc": "IPC", "uts": "UTS", "userns_mode": "user", "cgroup": "cgroup"}
_DEVICES = frozenset({"devices", "device_cgroup_rules", "gpus", "runtime"})


def check_compose(name: str, path: Path) -> None:
    """Refuse, with one sentence, a compose file that says something Amber would silently drop."""
    where = f"Task {name}'s environment/{COMPOSE_FILE}"
    ignored = ("Amber builds environment/Dockerfile and runs one container per Task, ignoring the compose file")
    try:
        data = yaml.load(path.read_bytes(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        detail, mark = getattr(e, "problem", None) or "unreadable", getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise Refused(f"{where} is not valid YAML ({detail}{at}): fix it or remove it.") from None
    if data is None:
        return
    if not isinstance(data, dict):
        raise Refused(f"{where} is not a mapping of compose keys: fix it or remove it.")
    for key in data:
        if key not in ("services", "version", "name") and not str(key).startswith("x-"):
            raise Refused(f"{where} declares top-level {key}, which Amber cannot honour ({ignored}): remove it.")
    services = data.get("services") or {}
    if not isinstance(services, dict):
        raise Refused(f"{where} gives services that are not a mapping of service names: fix it or remove it.")
    others = sorted(str(s) for s in services if s != "main")
    if others:
        raise Refused(f"{where} describes services beside main ({', '.join(others)}), but Amber runs one "
                      "container per Task: fold what they do into environment/Dockerfile, or leave the Task out.")
    main = services.get("main") or {}
    if not isinstance(main, dict):
        raise Refused(f"{where} gives a main service that is not a mapping: fix it or remove it.")
    for key, value in main.items():
        check = _COMPOSE_CHECKED.get(str(key))
        problem = check(value) if check else None  # the end of a sentence
        if problem is not None:
            raise Refused(f"{where} {problem}.")
        if key not in _COMPOSE_IGNORED and check is None:
            raise Refused(f"{where} sets {key} on the main service, which Amber cannot honour ({ignored}): remove "
                          "it, or do the same in environment/Dockerfile.")


def _privileged(value: Any) -> str | None:
    return ("runs the main service privileged, which Amber never allows: remove privileged" if value else None)


def _cap_add(value: Any) -> str | None:
    return ("adds Linux capabilities to the main service (cap_add), which Amber never grants: remove cap_add"
            if value else None)


def _network_mode(value: Any) -> str | None:
    if value in (None, "none"):
        return None
    if value == "host":
        return ("puts the main service on the host's network (network_mode: host), which Amber never allows: "
                "remove network_mode")
    return (f"puts the main service on network {value}, but Amber's sandboxes have no network of their own: "
            "remove network_mode")


def _build(value: Any) -> str | None:
    context, dockerfile, extra = value, None, []
    if isinstance(value, dict):
        context, dockerfile = value.get("context"), value.get("dockerfile")
        extra = sorted(str(k) for k in value if k not in ("context", "dockerfile"))
    if context in _HARBOR_CONTEXT and dockerfile in (None, "Dockerfile") and not extra:
        return None
    return ("builds the main service otherwise than from environment/Dockerfile as it is, which Amber builds "
            "without the compose file: give build only the context ${CONTEXT_DIR}, or remove build")


def _image(value: Any) -> str | None:
    if value in _HARBOR_IMAGES:
        return None
    return (f"runs the main service from image {value}, but Amber runs the image it builds from "
            "environment/Dockerfile: use image: ${MAIN_IMAGE_NAME} or remove image")


def _volumes(value: Any) -> str | None:
    for volume in value if isinstance(value, list) else [value]:
        kind, source = "bind", None
        if isinstance(volume, str):
            parts = volume.split(":")
            source = parts[0] if len(parts) > 1 else None
        elif isinstance(volume, dict):
            kind, source = volume.get("type", "volume"), volume.get("source")
        if source is None or kind == "tmpfs" or _HARBOR_MOUNT.match(str(source)):
            continue
        if kind == "bind" and str(source)[:1] in ("/", ".", "~", "$"):
            return (f"mounts the host path {source} into the main service, which Amber never does: put what the "
                    "Task needs into the image with environment/Dockerfile")
        return (f"mounts the volume {source} into the main service, which Amber does not create: put what the "
                "Task needs into the image with environment/Dockerfile")
    return None


def _deploy(value: Any) -> str | None:
    resources = table_at(value, "resources")
    if isinstance(value, dict) and set(value) - {"resources"}:
        key = sorted(str(k) for k in value if k != "resources")[0]
        return (f"sets deploy.{key} on the main service, but Amber runs one container per Task with the cpus and "
                "memory of task.toml: remove it")
    if table_at(resources, "reservations").get("devices") or table_at(resources, "limits").get("devices"):
        return ("reserves devices (GPUs) for the main service, which Amber's sandboxes do not have: remove them")
    return None


def _host_namespace(key: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is None:
            return None
        if value == "host":
            return (f"shares the host's {_HOST_NAMESPACES[key]} namespace with the main service ({key}: host), "
                    f"which Amber never allows: remove {key}")
        return (f"sets {key} on the main service, which Amber cannot honour (it runs one container per Task, "
                f"ignoring the compose file): remove {key}")
    return check


def _devices(key: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return (f"gives the main service host devices ({key}), which Amber never does: remove {key}"
                if value else None)
    return check


_COMPOSE_CHECKED: dict[str, Callable[[Any], str | None]] = {
    "privileged": _privileged, "cap_add": _cap_add, "network_mode": _network_mode, "build": _build,
    "image": _image, "volumes": _volumes, "deploy": _deploy,
    **{k: _host_namespace(k) for k in _HOST_NAMESPACES}, **{k: _devices(k) for k in _DEVICES},
}
