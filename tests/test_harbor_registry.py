"""Public Benchmarks from a Harbor registry: reading it, picking a dataset, fetching its Tasks at their pins.

Two git repositories are made on disk with the git CLI and named by file://
URLs (one lets clients filter blobs, so the fetch takes the blobless path; the
other does not, so it gets a full clone), beside a Task given by a local path.
Each Task is a demo-bench Task and changes after its pinned commit, so a fetch
that ignored the pin would show. A `git` shim on PATH counts git commands, to
prove a second fetch of the same pinned Tasks runs none. Nothing leaves the
machine: git reads file:// URLs and the HTTP registry is served on loopback.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from amber_pipeline.benchmarks import harbor_registry as hr
from amber_pipeline.benchmarks.versions import snapshot
from amber_pipeline.errors import AmberError

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo-bench"
REAL_GIT = shutil.which("git")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args], cwd=repo,
                          env=env, check=True, capture_output=True, text=True).stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def tree(folder: Path) -> dict[str, tuple[bytes, bool]]:
    """What a Task keeps of its files: relative path -> (bytes, executable)."""
    return {p.relative_to(folder).as_posix(): (p.read_bytes(), bool(p.stat().st_mode & stat.S_IXUSR))
            for p in sorted(folder.rglob("*")) if p.is_file()}


def one_sentence(error: pytest.ExceptionInfo[AmberError], *parts: str) -> str:
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message and message.endswith("."), message
    assert ". " not in message.rstrip("."), f"more than one sentence: {message}"
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"
    return message


@dataclass
class World:
    """Two task repositories, a registry naming them and a local Task, and the git shim's log."""

    tmp: Path
    repo_a: Path
    repo_b: Path
    a1: str  # pins active-user-emails
    b1: str  # pins count-log-errors
    registry: Path
    git_log: Path

    @property
    def url_a(self) -> str:
        return self.repo_a.as_uri()

    @property
    def url_b(self) -> str:
        return self.repo_b.as_uri()

    def git_calls(self) -> list[str]:
        return self.git_log.read_text().splitlines() if self.git_log.exists() else []

    def write_registry(self, datasets: list[dict]) -> str:
        self.registry.write_text(json.dumps(datasets))
        return str(self.registry)

    def dataset(self, version: str = "1.0", **overrides: dict) -> dict:
        tasks = {
            "active-user-emails": {"name": "active-user-emails", "git_url": self.url_a, "git_commit_id": self.a1,
                                   "path": "tasks/active-user-emails"},
            "count-log-errors": {"name": "count-log-errors", "git_url": self.url_b, "git_commit_id": self.b1,
                                 "path": "bench/count-log-errors"},
            "fix-off-by-one": {"name": "fix-off-by-one", "path": "local/fix-off-by-one"},
        }
        for name, change in overrides.items():
            tasks[name.replace("_", "-")] = {**tasks[name.replace("_", "-")], **change}
        return {"name": "demo-public", "version": version, "description": "demo Tasks from git",
                "tasks": list(tasks.values()), "metrics": [{"type": "mean"}]}

    def fetch(self, registry: str, ref: str = "demo-public@1.0", dest: str = "out") -> Path:
        spec = hr.find_dataset(hr.load_registry(registry), ref)
        return hr.fetch_dataset(spec, self.tmp / "cache", self.tmp / dest)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    assert REAL_GIT, "these tests need the git command line"
    repo_a, repo_b = tmp_path / "repo-a", tmp_path / "repo-b"
    for repo in (repo_a, repo_b):
        repo.mkdir()
        git(repo, "init", "-q")
    git(repo_a, "config", "uploadpack.allowFilter", "true")  # so the clone of repo-a is blobless

    shutil.copytree(DEMO / "active-user-emails", repo_a / "tasks" / "active-user-emails")
    (repo_a / "README.md").write_text("repo a\n")
    a1 = commit_all(repo_a, "add active-user-emails")
    emails = repo_a / "tasks" / "active-user-emails"
    (emails / "instruction.md").write_text("changed after the pin\n")
    (emails / "solution" / "solve.sh").chmod(0o644)
    (emails / "environment" / "extra.txt").write_text("added after the pin\n")
    commit_all(repo_a, "change active-user-emails")

    (repo_b / "bench").mkdir()
    (repo_b / "bench" / "unrelated.txt").write_text("b\n")
    commit_all(repo_b, "start")
    shutil.copytree(DEMO / "count-log-errors", repo_b / "bench" / "count-log-errors")
    b1 = commit_all(repo_b, "add count-log-errors")
    (repo_b / "bench" / "count-log-errors" / "environment" / "app.log").write_text("rewritten\n")
    (repo_b / "bench" / "count-log-errors" / "tests" / "test.sh").unlink()
    commit_all(repo_b, "change count-log-errors")

    registry_dir = tmp_path / "registry"
    shutil.copytree(DEMO / "fix-off-by-one", registry_dir / "local" / "fix-off-by-one")

    shim = tmp_path / "shim"
    shim.mkdir()
    log = tmp_path / "git-calls.log"
    (shim / "git").write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{REAL_GIT}" "$@"\n')
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    return World(tmp=tmp_path, repo_a=repo_a, repo_b=repo_b, a1=a1, b1=b1, registry=registry_dir / "registry.json",
                 git_log=log)


# Fetching -------------------------------------------------------------------------------------------------------


def test_a_fetched_dataset_holds_exactly_the_pinned_tasks(world: World) -> None:
    registry = world.write_registry([world.dataset()])
    out = world.fetch(registry)

    assert out == world.tmp / "out"
    assert sorted(p.name for p in out.iterdir()) == ["active-user-emails", "count-log-errors", "fix-off-by-one"]
    # as committed at the pins, not as the repositories are now: bytes and executable bits
    assert tree(out / "active-user-emails") == tree(DEMO / "active-user-emails")
    assert tree(out / "count-log-errors") == tree(DEMO / "count-log-errors")
    assert tree(out / "fix-off-by-one") == tree(DEMO / "fix-off-by-one")
    modes = {stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_file()}
    assert modes == {0o644, 0o755}
    assert not [p for p in out.rglob("*") if p.is_symlink()]

    # one clone per URL in the cache, blobless where the server allows it; one export per pinned Task
    cache = world.tmp / "cache"
    clone_a = cache / "git" / hashlib.sha256(world.url_a.encode()).hexdigest()
    clone_b = cache / "git" / hashlib.sha256(world.url_b.encode()).hexdigest()
    missing_a = git(clone_a, "rev-list", "--objects", "--missing=print", world.a1).split("\n")
    assert f"?{git(world.repo_a, 'rev-parse', f'{world.a1}:README.md')}" in missing_a  # blobless: not a Task file
    task_blobs = [line.split()[2] for line in git(world.repo_a, "ls-tree", "-r", world.a1, "tasks").split("\n")]
    assert len(task_blobs) == 6 and not [b for b in task_blobs if f"?{b}" in missing_a]
    assert not [line for line in git(clone_b, "rev-list", "--objects", "--missing=print", world.b1).split("\n")
                if line.startswith("?")]  # repo-b does not filter, so its clone is whole
    exported = cache / "tasks" / world.a1 / hashlib.sha256(b"tasks/active-user-emails").hexdigest()
    assert tree(exported) == tree(DEMO / "active-user-emails")
    assert sum(1 for call in world.git_calls() if " clone " in f" {call} ") == 2


def test_a_second_fetch_copies_from_the_cache_without_git(world: World) -> None:
    registry = world.write_registry([world.dataset()])
    first = world.fetch(registry, dest="first")
    calls = world.git_calls()
    assert calls, "the first fetch runs git"

    world.repo_a.rename(world.tmp / "repo-a-gone")
    shutil.rmtree(world.repo_b)
    second = world.fetch(registry, dest="second")

    assert world.git_calls() == calls, "no git command on the second fetch"
    for name in ("active-user-emails", "count-log-errors", "fix-off-by-one"):
        assert tree(second / name) == tree(first / name)


def test_a_new_pin_in_a_cloned_repository_fetches_just_that_commit(world: World) -> None:
    world.write_registry([world.dataset()])
    world.fetch(str(world.registry), dest="first")
    emails = world.repo_a / "tasks" / "active-user-emails"
    (emails / "instruction.md").write_text("the second version\n")
    a3 = commit_all(world.repo_a, "a third commit, after the clone")
    before = len(world.git_calls())

    registry = world.write_registry([world.dataset(), world.dataset("2.0", active_user_emails={"git_commit_id": a3})])
    out = world.fetch(registry, "demo-public@2.0", dest="second")

    new_calls = world.git_calls()[before:]
    assert not [c for c in new_calls if " clone " in f" {c} "], "the clone is reused"
    assert [c for c in new_calls if f"origin {a3}:refs/amber/{a3}" in c], "the missing commit is fetched by id"
    assert (out / "active-user-emails" / "instruction.md").read_text() == "the second version\n"
    assert not (out / "active-user-emails" / "solution" / "solve.sh").stat().st_mode & stat.S_IXUSR
    assert (out / "active-user-emails" / "environment" / "extra.txt").is_file()
    assert tree(out / "count-log-errors") == tree(DEMO / "count-log-errors")  # unchanged pin, from the cache


def test_the_fetched_folder_is_a_valid_benchmark(world: World) -> None:
    out = world.fetch(world.write_registry([world.dataset()]))
    version = snapshot(out, world.tmp / "store", name="demo-public")
    assert [t.name for t in version.tasks] == ["active-user-emails", "count-log-errors", "fix-off-by-one"]
    assert all(t.agent_timeout_sec == 120.0 for t in version.tasks)
    # the same pinned content always makes the same Benchmark Version
    again = world.fetch(str(world.registry), dest="again")
    assert snapshot(again, world.tmp / "store2").id == version.id


def test_a_whole_repository_can_be_one_task(world: World) -> None:
    single = world.tmp / "single"
    shutil.copytree(DEMO / "ini-port-change", single)
    git(single, "init", "-q")
    pin = commit_all(single, "one task at the root")
    registry = world.write_registry([{"name": "one", "version": "1", "description": "", "tasks": [
        {"name": "ini-port-change", "git_url": single.as_uri(), "git_commit_id": pin, "path": "."}]}])
    out = world.fetch(registry, "one")
    assert tree(out / "ini-port-change") == tree(DEMO / "ini-port-change")


# Refusals -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pin", [None, "head", "main", "abc1234", "g" * 40])
def test_an_unpinned_task_is_refused_before_any_git(world: World, pin: str | None) -> None:
    registry = world.write_registry([world.dataset(count_log_errors={"git_commit_id": pin})])
    with pytest.raises(AmberError) as error:
        world.fetch(registry)
    one_sentence(error, "count-log-errors", "demo-public@1.0", "must be pinned")
    assert world.git_calls() == []
    assert not (world.tmp / "out").exists()


def test_an_unknown_commit_is_one_sentence_naming_task_url_and_commit(world: World) -> None:
    absent = "0123456789abcdef" * 2 + "01234567"
    registry = world.write_registry([world.dataset(active_user_emails={"git_commit_id": absent})])
    with pytest.raises(AmberError) as error:
        world.fetch(registry)
    one_sentence(error, "active-user-emails", world.url_a, absent)
    assert not (world.tmp / "out").exists()


def test_a_missing_path_is_one_sentence(world: World) -> None:
    registry = world.write_registry([world.dataset(count_log_errors={"path": "bench/no-such-task"})])
    with pytest.raises(AmberError) as error:
        world.fetch(registry)
    one_sentence(error, "count-log-errors", world.url_b, world.b1, "bench/no-such-task")


def test_a_path_that_is_a_file_or_has_no_task_toml_is_one_sentence(world: World) -> None:
    for path, words in (("bench/unrelated.txt", "is a file"), ("bench", "no task.toml")):
        registry = world.write_registry([world.dataset(count_log_errors={"path": path})])
        with pytest.raises(AmberError) as error:
            world.fetch(registry)
        one_sentence(error, "count-log-errors", world.url_b, world.b1, words)


def test_an_unreachable_repository_is_one_sentence(world: World) -> None:
    gone = (world.tmp / "never-existed").as_uri()
    registry = world.write_registry([world.dataset(count_log_errors={"git_url": gone})])
    with pytest.raises(AmberError) as error:
        world.fetch(registry)
    one_sentence(error, "count-log-errors", gone, world.b1, "could not clone")


def test_a_symbolic_link_in_a_git_task_is_refused(world: World) -> None:
    emails = world.repo_a / "tasks" / "active-user-emails"
    (emails / "environment" / "link").symlink_to("/etc/passwd")
    pin = commit_all(world.repo_a, "a symlink")
    registry = world.write_registry([world.dataset(active_user_emails={"git_commit_id": pin})])
    with pytest.raises(AmberError) as error:
        world.fetch(registry)
    one_sentence(error, "active-user-emails", world.url_a, pin, "symbolic link", "environment/link")
    assert not (world.tmp / "out").exists()


def test_a_symbolic_link_in_a_local_task_is_refused(world: World) -> None:
    local = world.registry.parent / "local" / "fix-off-by-one"
    (local / "tests" / "link.sh").symlink_to(local / "tests" / "test.sh")
    registry = world.write_registry([world.dataset()])
    with pytest.raises(AmberError) as error:
        world.fetch(registry)
    one_sentence(error, "fix-off-by-one", "symbolic link", "link.sh")
    assert not (world.tmp / "out").exists() and not list(world.tmp.glob(".out.*"))


def test_a_missing_local_task_is_one_sentence(world: World) -> None:
    registry = world.write_registry([world.dataset(fix_off_by_one={"path": "local/nowhere"})])
    with pytest.raises(AmberError) as error:
        world.fetch(registry)
    one_sentence(error, "fix-off-by-one", "local/nowhere", "not a folder")


def test_task_names_must_be_unique_and_usable_as_folder_names(world: World) -> None:
    for name, words in (("active-user-emails", "more than one Task active-user-emails"), ("../up", "name")):
        registry = world.write_registry([world.dataset(count_log_errors={"name": name})])
        with pytest.raises(AmberError) as error:
            world.fetch(registry)
        one_sentence(error, words)
    assert world.git_calls() == []


def test_an_occupied_destination_is_refused(world: World) -> None:
    registry = world.write_registry([world.dataset()])
    (world.tmp / "out").mkdir()
    (world.tmp / "out" / "mine.txt").write_text("keep me")
    with pytest.raises(AmberError) as error:
        world.fetch(registry)
    one_sentence(error, "not an empty folder")
    assert (world.tmp / "out" / "mine.txt").read_text() == "keep me"


# Reading a registry ---------------------------------------------------------------------------------------------


def test_a_registry_reads_into_typed_records(world: World) -> None:
    registry = world.write_registry([world.dataset()])
    for source in (registry, world.registry.as_uri()):
        [spec] = hr.load_registry(source)
        assert (spec.name, spec.version, spec.description) == ("demo-public", "1.0", "demo Tasks from git")
        assert spec.tasks[0] == hr.RegistryTask(name="active-user-emails", path="tasks/active-user-emails",
                                                git_url=world.url_a, git_commit_id=world.a1)
        assert spec.tasks[2] == hr.RegistryTask(name="fix-off-by-one", path="local/fix-off-by-one")
        assert [m.type for m in spec.metrics] == ["mean"]
        assert spec.base == world.registry.parent
        assert hr.label_of(spec) == "demo-public@1.0"


@pytest.mark.parametrize(("content", "words"), [
    ("{not json", "not valid JSON"),
    ('{"name": "x"}', "JSON object, but a Harbor registry is a JSON array"),
    ('[{"name": "a", "version": "1", "tasks": []}, {"name": "b", "tasks": []}]',
     'dataset at index 1 (b) has no "version"'),
    ('[{"version": "1", "tasks": []}]', 'dataset at index 0 has no "name"'),
    ('[{"name": "a", "version": 2.0, "tasks": []}]', '"version" that is a JSON number'),
    ('[{"name": "a", "version": "1"}]', 'has no "tasks" list'),
    ('[{"name": "a", "version": "1", "tasks": {}}]', '"tasks" that is a JSON object'),
    ('[{"name": "a", "version": "1", "tasks": [{"name": "t"}]}]', 'task at index 0 (t) that has no "path"'),
    ('[{"name": "a", "version": "1", "tasks": [{"path": "p"}]}]', 'task at index 0 that has no "name"'),
    ('[{"name": "a", "version": "1", "tasks": [{"name": "t", "path": "p", "git_url": 3}]}]', '"git_url"'),
    ('[{"name": "a", "version": "1", "tasks": [], "metrics": [{}]}]', 'metric at index 0'),
    ('[{"name": "a", "version": "1", "tasks": []}, {"name": "a", "version": "1", "tasks": []}]',
     "index 0 and 1 are both a@1"),
    ("[7]", "dataset at index 0 is a JSON number"),
])
def test_a_malformed_registry_is_one_sentence(world: World, content: str, words: str) -> None:
    world.registry.write_text(content)
    with pytest.raises(AmberError) as error:
        hr.load_registry(str(world.registry))
    one_sentence(error, str(world.registry), words)


def test_a_registry_that_is_not_there_or_not_supported_is_one_sentence(world: World) -> None:
    for source, words in ((str(world.tmp / "nope.json"), "missing"), (str(world.tmp), "a folder"),
                          ("ftp://127.0.0.1/registry.json", "ftp://"), ("s3://bucket/registry.json", "s3://"),
                          ("file://elsewhere/registry.json", "names the host")):
        with pytest.raises(AmberError) as error:
            hr.load_registry(source)
        one_sentence(error, words)


@pytest.fixture
def http_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """A loopback HTTP server of a folder."""
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    root = tmp_path / "served"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_registry_over_http(world: World, http_root: tuple[Path, str]) -> None:
    root, base_url = http_root
    (root / "registry.json").write_text(json.dumps([world.dataset()]))
    datasets = hr.load_registry(f"{base_url}/registry.json")
    spec = hr.find_dataset(datasets, "demo-public")
    assert spec.base is None and len(spec.tasks) == 3

    # a local-path Task has no folder to be relative to when the registry came by URL
    with pytest.raises(AmberError) as error:
        hr.fetch_dataset(spec, world.tmp / "cache", world.tmp / "out")
    one_sentence(error, "fix-off-by-one", "local path")

    with pytest.raises(AmberError) as missing:
        hr.load_registry(f"{base_url}/missing.json")
    one_sentence(missing, "HTTP 404")


# Picking a dataset ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("versions", "chosen"), [
    (["1.0", "head", "2.0"], "head"),
    (["1.0", "2.0", "10.0"], "10.0"),  # PEP 440, not lexical
    (["2.0rc1", "1.9"], "2.0rc1"),
    (["1.0", "latest-snapshot"], "1.0"),  # a PEP 440 version beats any other string
    (["alpha", "beta"], "beta"),  # else the lexically last
    (["0.9", "1.0.0", "1"], "1.0.0"),  # equal PEP 440 versions: the first listed, as Harbor's stable sort
])
def test_a_name_alone_picks_the_version_harbor_would(versions: list[str], chosen: str) -> None:
    assert hr.resolve_version(versions) == chosen
    datasets = [hr.DatasetSpec(name="bench", version=v, description="", tasks=()) for v in versions]
    assert hr.find_dataset(datasets, "bench").version == chosen
    assert hr.find_dataset(datasets, f"bench@{versions[0]}").version == versions[0]


def test_unknown_names_and_versions_list_what_the_registry_has() -> None:
    datasets = [hr.DatasetSpec(name=f"bench-{i:02d}", version="1.0", description="", tasks=()) for i in range(14)]
    datasets.append(hr.DatasetSpec(name="bench-00", version="2.0", description="", tasks=()))

    with pytest.raises(AmberError) as error:
        hr.find_dataset(datasets, "terminal-bench@2.0")
    message = one_sentence(error, "terminal-bench", "bench-00, bench-01", "bench-09 and 4 more")
    assert "bench-10" not in message

    with pytest.raises(AmberError) as error:
        hr.find_dataset(datasets, "bench-00@3.0")
    one_sentence(error, "no version 3.0 of bench-00", "bench-00@1.0, bench-00@2.0")

    with pytest.raises(AmberError) as error:
        hr.find_dataset([], "anything")
    one_sentence(error, "anything")
