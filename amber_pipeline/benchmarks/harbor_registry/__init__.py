"""Public Benchmarks from a Harbor registry: read the registry, pick a dataset, fetch its Tasks at their pins.

Harbor's registry is a JSON array of datasets (``name``, ``version``,
``description``, ``tasks``, ``metrics``); each Task names a folder, either in
a git repository at a commit (``git_url``, ``git_commit_id``, ``path``) or on
disk next to the registry file (``path`` alone). Amber fetches one dataset
into a plain folder of Task folders, named by the registry's Task names, which
then becomes a public Benchmark Version like any other folder.

Why these rules:

- A public Benchmark Version must mean the same Tasks forever, so every git
  Task must be pinned to a full commit id; a branch, a tag, "head" or a short
  id is refused before anything is fetched.
- A Task holds files and folders, and a file keeps only whether it is
  executable, as Benchmark Versions do; a symbolic link in a Task is refused,
  from git or from a local folder.
- How git Tasks are exported at their commits, and cached so that a pinned
  Task is fetched again without running git, is in `git_tasks`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import types
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from packaging.version import InvalidVersion, Version

from amber_pipeline.benchmarks.harbor_registry.git_tasks import GitTask, export_tasks, repo_path
from amber_pipeline.benchmarks.tasks import TASK_NAME
from amber_pipeline.errors import AmberError

REGISTRY_TIMEOUT_SEC = 30.0
REGISTRY_MAX_BYTES = 64 * 1024 * 1024
LISTED = 10  # names shown when a reference matches none

PINNED = re.compile(r"^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$")
SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class RegistryTask:
    """One Task of a registry dataset: a folder in a git repository at a commit, or a local folder."""

    name: str
    path: str  # repository-relative for a git Task; relative to the registry file's folder otherwise
    git_url: str | None = None
    git_commit_id: str | None = None


@dataclass(frozen=True)
class Metric:
    """A dataset's metric as Harbor declares it (Amber scores Rewards its own way and only keeps it)."""

    type: str
    kwargs: Mapping[str, Any] = field(default_factory=lambda: types.MappingProxyType({}), hash=False)


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset of a registry: a Benchmark's name, version and Tasks."""

    name: str
    version: str
    description: str
    tasks: tuple[RegistryTask, ...]
    metrics: tuple[Metric, ...] = ()
    base: Path | None = None  # the registry file's folder, for local Tasks; None for a registry read by URL


def label_of(spec: DatasetSpec) -> str:
    return f"{spec.name}@{spec.version}"


# Reading a registry ---------------------------------------------------------------------------------------------


def load_registry(source: str) -> list[DatasetSpec]:
    """The datasets of a Harbor registry JSON file, given as a path, a file:// URL or an http(s):// URL."""
    text, base = _read(source)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise AmberError(f"The registry at {source} is not valid JSON ({e.msg} at line {e.lineno}, "
                         f"column {e.colno}): fix the file or give another registry.") from None
    if not isinstance(raw, list):
        raise AmberError(f"The registry at {source} is a JSON {_kind(raw)}, but a Harbor registry is a JSON "
                         "array of datasets: give a registry file in Harbor's format.")
    datasets = [_dataset(raw_dataset, index, source, base) for index, raw_dataset in enumerate(raw)]
    seen: dict[str, int] = {}
    for index, dataset in enumerate(datasets):
        first = seen.setdefault(label_of(dataset), index)
        if first != index:
            raise AmberError(f"The registry at {source} is malformed: the datasets at index {first} and {index} "
                             f"are both {label_of(dataset)}; give each version of a dataset once.")
    return datasets


def _read(source: str) -> tuple[str, Path | None]:
    """The registry's text and the folder its local Tasks are relative to (None when read over HTTP)."""
    scheme_match = SCHEME.match(source)
    scheme = scheme_match.group(1).lower() if scheme_match else None
    if scheme in ("http", "https"):
        return _download(source), None
    if scheme == "file":
        parsed = urllib.parse.urlparse(source)
        if parsed.netloc not in ("", "localhost"):
            raise AmberError(f"The registry URL {source} names the host {parsed.netloc}: a file:// URL must "
                             "name a file on this machine, as file:///path/to/registry.json.")
        path = Path(urllib.request.url2pathname(parsed.path))
    elif scheme is not None:
        raise AmberError(f"The registry {source} uses {scheme}://, which Amber does not read: give a file path, "
                         "a file:// URL or an http(s):// URL.")
    else:
        path = Path(source)
    if not path.is_file():
        what = "a folder" if path.is_dir() else "missing"
        raise AmberError(f"The registry file {path} is {what}: give the path of a Harbor registry JSON file.")
    try:
        return path.read_text(encoding="utf-8"), path.resolve().parent
    except (OSError, UnicodeDecodeError) as e:
        raise AmberError(f"The registry file {path} cannot be read ({_reason(e)}): "
                         "check its permissions and that it is UTF-8 JSON.") from None


def _download(url: str) -> str:
    request = urllib.request.Request(url, headers={"User-Agent": "amber", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=REGISTRY_TIMEOUT_SEC) as response:
            body: bytes = response.read(REGISTRY_MAX_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise AmberError(f"The registry at {url} answered HTTP {e.code} ({e.reason}): "
                         "check the URL, or give a registry file path.") from None
    except (urllib.error.URLError, OSError) as e:
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        raise AmberError(f"The registry at {url} cannot be reached ({_reason(reason)}): "
                         "check the URL and the network, or give a registry file path.") from None
    if len(body) > REGISTRY_MAX_BYTES:
        raise AmberError(f"The registry at {url} is larger than {REGISTRY_MAX_BYTES // (1024 * 1024)} MB: "
                         "give a smaller registry file.")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise AmberError(f"The registry at {url} is not UTF-8 text: give a Harbor registry JSON file.") from None


def _dataset(raw: object, index: int, source: str, base: Path | None) -> DatasetSpec:
    where = f"the dataset at index {index}"

    def bad(problem: str) -> NoReturn:
        raise AmberError(f"The registry at {source} is malformed: {where} {problem}; "
                         "fix the registry or give another one.")

    if not isinstance(raw, dict):
        bad(f"is a JSON {_kind(raw)}, not an object")
    name = _text(raw, "name", bad)
    where = f"the dataset at index {index} ({name})"
    version = _text(raw, "version", bad)
    where = f"the dataset at index {index} ({name}@{version})"
    description = raw.get("description") or ""
    if not isinstance(description, str):
        bad(f'has a "description" that is a JSON {_kind(description)}, not a string')
    raw_tasks = raw.get("tasks")
    if not isinstance(raw_tasks, list):
        bad('has no "tasks" list' if raw_tasks is None else f'has "tasks" that is a JSON {_kind(raw_tasks)}')
    tasks = tuple(_task(raw_task, i, bad) for i, raw_task in enumerate(raw_tasks))
    raw_metrics = raw.get("metrics") or []
    if not isinstance(raw_metrics, list):
        bad(f'has "metrics" that is a JSON {_kind(raw_metrics)}, not a list')
    metrics = tuple(_metric(raw_metric, i, bad) for i, raw_metric in enumerate(raw_metrics))
    return DatasetSpec(name=name, version=version, description=description, tasks=tasks, metrics=metrics, base=base)


def _task(raw: object, index: int, bad: Callable[[str], NoReturn]) -> RegistryTask:
    if not isinstance(raw, dict):
        bad(f"has a task at index {index} that is a JSON {_kind(raw)}, not an object")
    task = f"task at index {index}"

    def bad_task(problem: str) -> NoReturn:
        bad(f"has a {task} that {problem}")

    name = _text(raw, "name", bad_task)
    task = f"task at index {index} ({name})"
    path = raw.get("path")
    if not isinstance(path, str):
        bad_task('has no "path"' if path is None else f'has a "path" that is a JSON {_kind(path)}, not a string')
    optional = {}
    for key in ("git_url", "git_commit_id"):
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            bad_task(f'has a "{key}" that is a JSON {_kind(value)}, not a string')
        optional[key] = value or None
    return RegistryTask(name=name, path=path, **optional)


def _metric(raw: object, index: int, bad: Callable[[str], NoReturn]) -> Metric:
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        bad(f'has a metric at index {index} without a "type" string')
    kwargs = raw.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        bad(f'has a metric at index {index} whose "kwargs" is not an object')
    return Metric(type=raw["type"], kwargs=types.MappingProxyType(dict(kwargs)))


def _text(raw: dict[str, Any], key: str, bad: Callable[[str], NoReturn]) -> str:
    value = raw.get(key)
    if value is None:
        bad(f'has no "{key}"')
    if not isinstance(value, str) or not value:
        bad(f'has a "{key}" that is {"empty" if value == "" else f"a JSON {_kind(value)}"}, not a non-empty string')
    return value


def _kind(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


# Picking a dataset ----------------------------------------------------------------------------------------------


def resolve_version(versions: Sequence[str]) -> str:
    """Harbor's rule for a dataset named without a version: "head", else the highest PEP 440 version, else the
    lexically last one (harbor/registry/client/base.py, resolve_version)."""
    if not versions:
        raise ValueError("no versions to choose from")
    if "head" in versions:
        return "head"
    parsed = []
    for v in versions:
        try:
            parsed.append((Version(v), v))
        except InvalidVersion:
            pass
    if parsed:
        return max(parsed, key=lambda pair: pair[0])[1]
    return max(versions)


def find_dataset(datasets: Sequence[DatasetSpec], ref: str) -> DatasetSpec:
    """The dataset ``name@version`` (or ``name``, at the version Harbor would pick) of a registry."""
    name, _, version = ref.partition("@")
    same_name = [d for d in datasets if d.name == name]
    if not same_name:
        if not datasets:
            raise AmberError(f"The registry has no dataset {name}, nor any other: give another registry.")
        raise AmberError(f"The registry has no dataset named {name}; it has "
                         f"{_some(sorted({d.name for d in datasets}))}: give one of those names.")
    version = version or resolve_version([d.version for d in same_name])
    for dataset in same_name:
        if dataset.version == version:
            return dataset
    raise AmberError(f"The registry has no version {version} of {name}; it has "
                     f"{_some(sorted(label_of(d) for d in same_name))}: give one of those.")


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown if len(names) <= LISTED else f"{shown} and {len(names) - LISTED} more"


# Fetching a dataset ---------------------------------------------------------------------------------------------


def fetch_dataset(spec: DatasetSpec, cache: Path, dest: Path) -> Path:
    """Write ``dest/<task name>/`` for every Task of the dataset, at its pinned commit, and return ``dest``.

    Everything that can be checked without fetching (names, pins, paths) is
    checked first, so a dataset that cannot be fetched fetches nothing.
    ``dest`` must be new or empty; it appears complete or not at all.
    """
    _check_fetchable(spec)
    dest = dest.absolute()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise AmberError(f"{dest} already exists and is not an empty folder: give a new folder to fetch "
                         f"{label_of(spec)} into.")
    cache = cache.absolute()
    sources = _task_sources(spec, cache)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.{uuid.uuid4().hex}.tmp"
    try:
        staging.mkdir()
        for task in spec.tasks:
            _copy_task(spec, task, sources[task.name], staging / task.name)
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def _check_fetchable(spec: DatasetSpec) -> None:
    label = label_of(spec)
    if not spec.tasks:
        raise AmberError(f"{label} has no Tasks in the registry: pick another dataset.")
    seen: set[str] = set()
    for task in spec.tasks:
        if not TASK_NAME.fullmatch(task.name):
            raise AmberError(f"Task {task.name!r} of {label} has a name Amber cannot use as a folder name: "
                             "rename it in the registry with letters, digits, '.', '_' and '-' only, starting "
                             "with a letter or digit, at most 128 characters.")
        if task.name in seen:
            raise AmberError(f"{label} names more than one Task {task.name}: Task names must be unique in a "
                             "dataset, so fix the registry.")
        seen.add(task.name)
        if task.git_url is None:
            if spec.base is None:
                raise AmberError(f"Task {task.name} of {label} is a local path ({task.path}), which only a registry "
                                 "read from a file can have: give the registry as a file path.")
            continue
        if task.git_commit_id is None or not PINNED.match(task.git_commit_id):
            pin = "no git_commit_id" if task.git_commit_id is None else f"git_commit_id {task.git_commit_id!r}"
            raise AmberError(f"Task {task.name} of {label} has {pin}, but a public Benchmark Version must be "
                             "pinned: give every git Task a full 40- or 64-hex commit id in the registry.")
        if repo_path(task.path) is None:
            raise AmberError(f"Task {task.name} of {label} has the path {task.path!r}, which is not a relative "
                             "path inside its repository: fix its path in the registry.")


def _task_sources(spec: DatasetSpec, cache: Path) -> dict[str, Path]:
    """Where each Task's files are: its local folder, or its cached export (made now if missing)."""
    sources: dict[str, Path] = {}
    for task in spec.tasks:
        if task.git_url is None:
            assert spec.base is not None
            sources[task.name] = spec.base / task.path
    pinned = [GitTask(name=task.name, url=task.git_url, commit=(task.git_commit_id or "").lower(), path=task.path)
              for task in spec.tasks if task.git_url is not None]
    sources.update(export_tasks(label_of(spec), pinned, cache))
    return sources


def _copy_task(spec: DatasetSpec, task: RegistryTask, source: Path, target: Path) -> None:
    """Copy a Task folder: files and folders only, each file keeping only whether it is executable."""
    where = f"Task {task.name} of {label_of(spec)}"
    if not source.is_dir():
        raise AmberError(f"{where} is a local path, but {source} is not a folder: fix its path in the registry.")
    if not (source / "task.toml").is_file():
        raise AmberError(f"{where} has no task.toml in {source}: fix its path in the registry.")
    target.mkdir()
    prefix = len(str(source)) + 1
    for folder, dirs, files in os.walk(source):
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(folder, name)
            copy = target / path[prefix:]
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise AmberError(f"{where} holds a symbolic link, {path[prefix:]} in {source}: Tasks may hold "
                                 "only files and folders, so replace it with the file it points to.")
            if stat.S_ISDIR(mode):
                copy.mkdir()
            elif stat.S_ISREG(mode):
                shutil.copyfile(path, copy)
                os.chmod(copy, 0o755 if mode & stat.S_IXUSR else 0o644)
            else:
                raise AmberError(f"{where} holds {path}, which is neither a file nor a folder: remove it.")


def _reason(error: object) -> str:
    text = str(error).strip().rstrip(".")
    return text.splitlines()[0] if text else type(error).__name__
