"""Task checks: each Task of an uploaded Benchmark, checked on its own before anything runs.

`check_tasks` finds every folder holding a task.toml (at any depth; a Task's
own sub-folders are not searched for more Tasks) and gives each a `TaskCheck`:
passed, or failed with one sentence a user can act on. One bad Task never
stops the others, and no input raises: an unexpected error while checking a
Task becomes that Task's reason. The checks are the format rules of
`../shared/spec/amber-task-format.md`, in this order (the first failure is
the reason):

1. task.toml is at most 1 MB (`tasks.MAX_TASK_FILE_BYTES`) of UTF-8 TOML that
   Harbor 0.25's `TaskConfig` accepts, the name is made of letters, digits,
   `.`, `_` and `-`, and the Task loads as
   `tasks.load_task` loads it for a Benchmark Version (an instruction.md; a
   multi-step Task is refused; a static Task's `[metadata.amber.static]` is
   valid), so a Task that passes here also snapshots and runs;
2. no env value filled from the machine running the Task (`${VAR}`,
   `${VAR:-default}`, anywhere in the value) in any env table or MCP header;
3. no GPUs or TPUs, and at most what one sandbox has (4 cpus, 8192
   memory_mb, 10240 storage_mb, read after Harbor converts a legacy
   `memory = "2G"`); resources and timeouts positive and finite: the rules
   of `benchmarks.limits`, which every Quote applies too;
4. a Verifier, `tests/test.sh`, and an Environment: `environment/Dockerfile`
   or `[environment].docker_image`.
   Amber builds `environment/Dockerfile` itself and runs one container per
   Task: it ignores `environment/docker-compose.yaml`. So a compose file is
   accepted only when it describes nothing Amber would silently drop that
   matters, i.e. the `main` service the way Harbor's own templates do (build
   context `${CONTEXT_DIR}`, `image: ${MAIN_IMAGE_NAME}`, cpus and memory from
   `${CPUS}`/`${MEMORY}`, `network_mode: none`, Harbor's `${HOST_*_PATH}`
   log mounts, a command or healthcheck...). Other services, privileged mode,
   added capabilities, devices, the host's network, pid or ipc namespace, or
   host bind mounts are refused;
5. every COPY and ADD of every Dockerfile under `environment/` reads from
   inside `environment/` (relative to the Dockerfile's folder; no absolute
   source, no `..` out of it, no ADD of a URL; `--from` copies read another
   stage and are fine; heredoc sources are inline text);
6. every base image (each `FROM`, ARG defaults filled in, build stages and
   `scratch` skipped; an image a `COPY --from` names; a `docker_image` used
   without a Dockerfile) is on this machine, since no registry is reachable.
   The engine is asked for its images once per call; when it does not answer
   (and no `local_images` is given), this check is skipped and adds nothing,
   as the build will say it then.

File modes are no check: the unpacker keeps only the executable bit, and
Harbor runs scripts with bash whether they have it or not. A static Task (no
Environment, `[metadata.amber.static]`) skips checks 4 to 6.

This module runs the rules in that order and turns each refusal into its
Task's reason; the compose rules of check 4 are `compose`, and reading
Dockerfiles for checks 5 and 6 is `dockerfiles`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amber_pipeline.benchmarks import limits
from amber_pipeline.benchmarks.intake.compose import COMPOSE_FILE, check_compose
from amber_pipeline.benchmarks.intake.dockerfiles import BaseImage, check_dockerfile, find_dockerfiles
from amber_pipeline.benchmarks.intake.task_refusals import Refused, table_at
from amber_pipeline.benchmarks.tasks import TASK_FILE, TASK_NAME, read_config, task_name, task_spec
from amber_pipeline.errors import AmberError

if TYPE_CHECKING:
    from harbor.models.task.config import TaskConfig

BASE_IMAGE = "amber-base:bookworm"

_TEMPLATE = re.compile(r"\$\{[^}]*\}")


@dataclass(frozen=True)
class TaskCheck:
    """One Task of an upload and its check: passed, or the one sentence saying why not."""

    name: str
    folder: str  # relative to the checked root, "/"-separated ("." for the root itself)
    ok: bool
    reason: str | None = None
    static: bool = False  # no Environment ([metadata.amber.static]): validated on the host, at no cost


@dataclass
class _Found:
    """One Task while it is checked: the images it needs are looked up once all Tasks are read."""

    name: str
    folder: str
    reason: str | None = None
    static: bool = False
    images: list[BaseImage] = field(default_factory=list)


def check_tasks(root: Path, *, local_images: set[str] | None = None) -> list[TaskCheck]:
    """Every Task under ``root``, each checked on its own, sorted by folder.

    ``local_images`` is the set of `repo:tag` and `repo@sha256:...` names the Docker engine has; when None,
    the local engine is asked once (and the base-image check is skipped if it does not answer).
    """
    root = Path(os.path.abspath(root))
    found = [_check(task_dir, root) for task_dir in _task_dirs(root)]
    if any(f.reason is None and f.images for f in found):
        known = local_images if local_images is not None else _engine_images()
        if known is not None:
            names = {_normalized(n) for n in known}
            for f in found:
                missing = next((i for i in f.images if _normalized(i.ref) not in names), None)
                if f.reason is None and missing is not None:
                    f.reason = _missing_image(missing)
    _refuse_duplicates(found)
    prefix = str(root) + os.sep
    return sorted((TaskCheck(f.name, f.folder, f.reason is None,
                             None if f.reason is None else " ".join(f.reason.replace(prefix, "").split()),
                             f.static and f.reason is None)
                   for f in found), key=lambda c: c.folder)


def _task_dirs(root: Path) -> Iterator[Path]:
    """Folders holding a task.toml, without looking inside them for more (links are never followed)."""
    pending = [str(root)]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        if any(e.name == TASK_FILE and e.is_file(follow_symlinks=False) for e in entries):
            yield Path(folder)
            continue
        pending.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))


def _check(task_dir: Path, root: Path) -> _Found:
    rel = str(task_dir)[len(str(root)) + 1:].replace(os.sep, "/") if task_dir != root else "."
    found = _Found(name=task_dir.name or task_dir.resolve().name, folder=rel)
    try:
        raw, config = read_config(task_dir / TASK_FILE)
        found.name = task_name(task_dir, config)
        if not TASK_NAME.fullmatch(found.name):
            raise Refused(f"Task folder {rel} is named {found.name}, but Task names use only letters, digits, "
                          "'.', '_' and '-', start with a letter or digit and have at most 128 characters: rename "
                          "the folder.")
        _check_env_values(found.name, raw)
        limits.check(found.name, raw, config)
        spec = task_spec(task_dir, task_dir.parent, raw, config)
        found.static = spec.static is not None
        if not found.static:
            if not (task_dir / "tests" / "test.sh").is_file():
                raise Refused(f"Task {found.name} has no Verifier: add tests/test.sh, which writes a Reward from 0 "
                              "to 1 to /logs/verifier/reward.txt.")
            found.images = _check_environment(found.name, task_dir, config)
    except (AmberError, Refused) as e:
        found.reason = str(e)
    except Exception as e:  # a bug or a file we cannot read: this Task fails, the others go on
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        found.reason = f"Task {found.name} could not be checked ({detail}): check its files and upload it again."
    return found


# ---- env values ------------------------------------------------------------------------------------------

def _check_env_values(name: str, raw: dict[str, Any]) -> None:
    tables = [("[environment.env]", table_at(raw, "environment", "env")),
              ("[solution.env]", table_at(raw, "solution", "env")),
              ("[verifier.env]", table_at(raw, "verifier", "env")),
              ("[verifier.environment.env]", table_at(raw, "verifier", "environment", "env"))]
    for i, step in enumerate(raw.get("steps") or [], 1):
        label = step.get("name", i) if isinstance(step, dict) else i
        tables += [(f"[steps.{part}.env] of step {label}", table_at(step, *part.split("."), "env"))
                   for part in ("agent", "verifier", "verifier.environment")]
    for table, env in tables:
        for key, value in env.items():
            found = _TEMPLATE.search(str(value))
            if found:
                raise Refused(f"Task {name}'s {table} fills {key} from the machine running it ({found[0]}): "
                              "give a literal value.")
    for where in ("environment", "verifier.environment"):
        servers = table_at(raw, *where.split(".")).get("mcp_servers")
        for server in servers if isinstance(servers, list) else []:
            for header, value in table_at(server, "headers").items():
                if _TEMPLATE.search(str(value)):
                    raise Refused(f"Task {name}'s MCP server {server.get('name')} in [[{where}.mcp_servers]] fills "
                                  f"its {header} header from the machine running it: remove the header, as Amber "
                                  "gives Tasks nothing of that machine's environment.")


# ---- the Environment ------------------------------------------------------------------------------------------

def _check_environment(name: str, task_dir: Path, config: TaskConfig) -> list[BaseImage]:
    """The Environment's checks; the images it needs, for the base-image check."""
    environment = task_dir / "environment"
    dockerfile = environment / "Dockerfile"
    docker_image = config.environment.docker_image
    compose = environment / COMPOSE_FILE
    if not dockerfile.is_file() and not docker_image:
        if compose.is_file():
            raise Refused(f"Task {name}'s Environment is only environment/{COMPOSE_FILE}, which Amber does not "
                          "run: add the environment/Dockerfile it builds.")
        raise Refused(f"Task {name} has no Environment: add environment/Dockerfile or set "
                      "[environment].docker_image (or declare [metadata.amber.static] checks for a static Task).")
    if compose.is_file():
        check_compose(name, compose)
    images: list[BaseImage] = []
    for path in find_dockerfiles(environment):
        rel = str(path)[len(str(environment)) + 1:].replace(os.sep, "/")
        needed = check_dockerfile(name, path, rel)
        if path == dockerfile:
            if not needed:
                raise Refused(f"Task {name}'s Dockerfile has no FROM instruction: start it with one, "
                              f"such as FROM {BASE_IMAGE}.")
            images = needed
    if not dockerfile.is_file() and docker_image:
        images = [BaseImage(docker_image, f"Task {name}'s [environment].docker_image is")]
    return images


# ---- base images, names ---------------------------------------------------------------------------------------

def _normalized(ref: str) -> str:
    """An image reference as Docker lists it: docker.io/library/ dropped, :latest implied, a digest over a tag."""
    name, _, digest = ref.strip().partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    repo, tag = (name[:colon], name[colon + 1:]) if colon > slash else (name, "latest")
    for prefix in ("docker.io/", "index.docker.io/"):
        if repo.startswith(prefix):
            repo = repo[len(prefix):]
            break
    if repo.startswith("library/") and repo.count("/") == 1:
        repo = repo[len("library/"):]
    return f"{repo}@{digest}" if digest else f"{repo}:{tag}"


def _missing_image(image: BaseImage) -> str:
    if "@" in image.ref:
        return (f"{image.where} {image.ref}, a digest this machine does not have and cannot pull (no registry is "
                "reachable): drop the @sha256 pin and load the image under its tag with `docker load`, or base the "
                f"Task on {BASE_IMAGE}.")
    return (f"{image.where} {image.ref}, which this machine does not have and cannot pull (no registry is "
            f"reachable): load it with `docker load` or build it under that name, or base the Task on {BASE_IMAGE}.")


def _engine_images() -> set[str] | None:
    """The names the local Docker engine has, asked once; None when it does not answer."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            # the low-level list is one request; images.list() inspects every image on top of it
            rows = client.api.images()
        finally:
            client.close()
    except Exception:  # no engine, no socket, no permission: the build will say so itself
        return None
    names: set[str] = set()
    for row in rows:
        names.update(n for n in (row.get("RepoTags") or []) + (row.get("RepoDigests") or []) if "<none>" not in n)
    return names


def _refuse_duplicates(found: list[_Found]) -> None:
    folders: dict[str, list[str]] = {}
    for f in found:
        folders.setdefault(f.name, []).append(f.folder)
    for f in found:
        others = sorted(o for o in folders[f.name] if o != f.folder)
        if others and f.reason is None:
            listed = others[0] if len(others) == 1 else ", ".join(others[:-1]) + " and " + others[-1]
            f.reason = (f"Task {f.name} in {f.folder} has the same name as the Task in {listed}: Task names are "
                        "unique in an upload, so rename one of the folders (or its [task] name).")
