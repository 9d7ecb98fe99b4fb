"""AmberSandbox against a real Docker engine: what a user of Amber would check.

No mocks: every test starts real containers from the local base image
`amber-base:bookworm`, either through Harbor's `Trial` (as `trial_runner` does)
or by constructing the sandbox directly. Every container a test makes carries
the label `org.amber.sandbox=<session id>` with a session id unique to this run,
so assertions look only at this test's own containers (other tests may run at
the same time), and teardown force-removes whatever a failing test left behind.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

BASE_IMAGE = "amber-base:bookworm"
SANDBOX_LABEL = "org.amber.sandbox"


def _docker_or_skip():
    from amber_pipeline.errors import AmberError
    from amber_pipeline.sandbox import docker_engine

    try:
        client = docker_engine.connect(timeout=30)
        client.images.get(BASE_IMAGE)
    except AmberError as e:
        pytest.skip(str(e), allow_module_level=True)
    except Exception as e:  # noqa: BLE001 - the base image is missing
        pytest.skip(f"{BASE_IMAGE} is not available: {e}", allow_module_level=True)
    return client


DOCKER = _docker_or_skip()

from harbor.environments.definition import environment_content_hash  # noqa: E402
from harbor.models.task.config import TaskConfig as TaskToml  # noqa: E402
from harbor.models.trial.paths import TrialPaths  # noqa: E402
from servers import dockerd  # noqa: E402

from amber_pipeline.jobs import outcomes  # noqa: E402
from amber_pipeline.models.endpoint import offline_litellm  # noqa: E402
from amber_pipeline.sandbox import environment as sandbox  # noqa: E402
from amber_pipeline.sandbox.environment import AmberSandbox  # noqa: E402

offline_litellm()

PASS_TEST = "#!/bin/bash\nmkdir -p /logs/verifier\n[ -f /app/done ] && printf 1 > /logs/verifier/reward.txt " \
            "|| printf 0 > /logs/verifier/reward.txt\n"
SOLVE = "#!/bin/bash\nmkdir -p /app && touch /app/done\n"


# ---- helpers -------------------------------------------------------------------


def uid() -> str:
    return uuid.uuid4().hex[:10]


def make_task(root: Path, name: str, *, dockerfile: str = f"FROM {BASE_IMAGE}\nWORKDIR /app\n",
              test_sh: str = PASS_TEST, solve_sh: str = SOLVE, verifier_timeout: float = 30.0,
              build_timeout: float = 120.0, cpus: float = 1, memory_mb: int = 512) -> Path:
    """A tiny Harbor Task folder."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text(
        'version = "1.0"\n\n[agent]\ntimeout_sec = 60.0\n\n'
        f"[verifier]\ntimeout_sec = {verifier_timeout}\n\n"
        f"[environment]\nbuild_timeout_sec = {build_timeout}\ncpus = {cpus}\nmemory_mb = {memory_mb}\n")
    (task / "instruction.md").write_text("Create /app/done.\n")
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    for rel, text in (("tests/test.sh", test_sh), ("solution/solve.sh", solve_sh)):
        (task / rel).write_text(text)
        (task / rel).chmod(0o755)
    return task


def task_env_config(task: Path):
    return TaskToml.model_validate(tomllib.loads((task / "task.toml").read_text())).environment


def containers_of(session_id: str) -> list:
    return DOCKER.containers.list(all=True, filters={"label": f"{SANDBOX_LABEL}={session_id}"})


def ps_args(sb: AmberSandbox) -> list[str]:
    result = asyncio.run(sb.exec("ps -eo args", user="root"))
    return [line.strip() for line in (result.stdout or "").splitlines()]


class Tracker:
    """Remembers this test's session ids and image tags, and removes leftovers."""

    def __init__(self) -> None:
        self.sessions: list[str] = []
        self.images: list[str] = []

    def session(self, prefix: str) -> str:
        sid = f"amber-test-{prefix}-{uid()}"
        self.sessions.append(sid)
        return sid

    def cleanup(self) -> None:
        for sid in self.sessions:
            for c in containers_of(sid):
                c.remove(force=True)
        for tag in self.images:
            try:
                DOCKER.images.remove(tag, force=True)
            except Exception:  # noqa: BLE001 - already gone, or still used elsewhere
                pass


@pytest.fixture
def tracker() -> Iterator[Tracker]:
    t = Tracker()
    yield t
    t.cleanup()


def new_sandbox(task: Path, session_id: str, trial_dir: Path) -> AmberSandbox:
    trial_dir.mkdir(parents=True, exist_ok=True)
    return AmberSandbox(environment_dir=task / "environment", environment_name=task.name,
                        session_id=session_id, trial_paths=TrialPaths(trial_dir),
                        task_env_config=task_env_config(task))


def run_trial(task: Path, trials_dir: Path, agent: str, trial_name: str):
    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
    from harbor.trial.trial import Trial

    config = TrialConfig(
        task=TaskConfig(path=task), trials_dir=trials_dir, trial_name=trial_name,
        agent=AgentConfig(name=agent),
        environment=EnvironmentConfig(import_path="amber_pipeline.sandbox.environment:AmberSandbox"))

    async def go():
        return await (await Trial.create(config)).run()

    return asyncio.run(go())


# ---- one running sandbox shared by the exec / file / limit tests ------------------


@pytest.fixture(scope="module")
def box(tmp_path_factory) -> Iterator[AmberSandbox]:
    root = tmp_path_factory.mktemp("box")
    task = make_task(root, "box", cpus=1, memory_mb=300)
    sid = f"amber-test-box-{uid()}"
    sb = new_sandbox(task, sid, root / "trial")
    try:
        asyncio.run(sb.start(force_build=False))
        yield sb
    finally:
        asyncio.run(sb.stop(delete=True))
        for c in containers_of(sid):
            c.remove(force=True)


# ---- 1. no container outlives its Trial ----------------------------------------


@pytest.mark.parametrize("agent,reward", [("oracle", 1.0), ("nop", 0.0)])
def test_no_container_outlives_a_trial(tmp_path, agent, reward):
    task = make_task(tmp_path / "tasks", "touch-done")
    name = f"amber-test-{agent}-{uid()}"
    result = run_trial(task, tmp_path / "trials", agent, name)
    assert result.exception_info is None
    assert result.verifier_result.rewards["reward"] == reward
    assert containers_of(f"{name}__env") == []


def test_no_container_outlives_a_trial_whose_verifier_times_out(tmp_path):
    task = make_task(tmp_path / "tasks", "slow-verifier", verifier_timeout=1.0,
                     test_sh="#!/bin/bash\nsleep 300\nprintf 1 > /logs/verifier/reward.txt\n")
    name = f"amber-test-vto-{uid()}"
    t0 = time.monotonic()
    result = run_trial(task, tmp_path / "trials", "nop", name)
    elapsed = time.monotonic() - t0
    assert result.exception_info is not None
    assert result.exception_info.exception_type == "VerifierTimeoutError"
    assert result.verifier_result is None
    assert elapsed < 15, f"a 1 s verifier timeout took {elapsed:.1f} s to end the Trial"
    assert containers_of(f"{name}__env") == []


def test_no_container_outlives_a_trial_whose_image_fails_to_build(tmp_path, tracker):
    # Test 9 checks the result; this one only the containers.
    task = make_task(tmp_path / "tasks", "no-build", dockerfile=f"FROM {BASE_IMAGE}\nRUN echo {uid()} && false\n")
    tracker.images.append(sandbox.image_tag(task / "environment"))
    name = f"amber-test-nobuild-{uid()}"
    tracker.sessions.append(f"{name}__env")
    run_trial(task, tmp_path / "trials", "oracle", name)
    assert containers_of(f"{name}__env") == []


def test_no_container_outlives_a_trial_whose_start_times_out(tmp_path, tracker):
    task = make_task(tmp_path / "tasks", "slow-build", build_timeout=1.0,
                     dockerfile=f"FROM {BASE_IMAGE}\nRUN echo {uid()} && sleep 4\n")
    tracker.images.append(sandbox.image_tag(task / "environment"))
    name = f"amber-test-slowbuild-{uid()}"
    tracker.sessions.append(f"{name}__env")
    # asyncio.run joins the worker threads before it returns, so the build has
    # finished (and its container, if any, exists) when we look.
    result = run_trial(task, tmp_path / "trials", "nop", name)
    assert result.exception_info.exception_type == "EnvironmentStartTimeoutError"
    assert containers_of(f"{name}__env") == []


# ---- 2-4. commands: timeouts, cancellation, exit code 124 -----------------------------


def test_timed_out_command_raises_and_leaves_no_process(box):
    async def go():
        running = asyncio.ensure_future(box.exec("sleep 300 & sleep 300; echo never", timeout_sec=2))
        await asyncio.sleep(1.0)
        during = await box.exec("ps -eo args", user="root")
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await running
        return during.stdout.splitlines(), time.monotonic() - t0

    t0 = time.monotonic()
    during, _ = asyncio.run(go())
    elapsed = time.monotonic() - t0
    assert [line.strip() for line in during].count("sleep 300") == 2, "the command never ran"
    assert elapsed < 6, f"a 2 s timeout took {elapsed:.1f} s"
    assert "sleep 300" not in ps_args(box)


def test_cancelled_command_leaves_no_process(box):
    async def go():
        running = asyncio.ensure_future(box.exec("sleep 300 & sleep 300; echo never"))
        await asyncio.sleep(1.0)
        during = await box.exec("ps -eo args", user="root")
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        return during.stdout.splitlines()

    t0 = time.monotonic()
    during = asyncio.run(go())
    assert [line.strip() for line in during].count("sleep 300") == 2, "the command never ran"
    assert time.monotonic() - t0 < 6
    assert "sleep 300" not in ps_args(box)


def test_user_exit_124_is_not_a_timeout(box):
    result = asyncio.run(box.exec("echo out; echo err >&2; exit 124", timeout_sec=30))
    assert result.return_code == 124
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    # and with no timeout at all
    assert asyncio.run(box.exec("exit 124")).return_code == 124


# ---- 5. uploads belong to root --------------------------------------------------------


def test_uploaded_files_are_owned_by_root_with_normalized_modes(box, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\necho hi\n")
    script.chmod(0o750)
    data = tmp_path / "data.txt"
    data.write_text("x")
    data.chmod(0o600)
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "tool").write_text("#!/bin/sh\n")
    (src / "sub" / "tool").chmod(0o700)
    (src / "notes.md").write_text("n")
    (src / "notes.md").chmod(0o664)
    for p in (script, data, src, src / "sub", src / "sub" / "tool", src / "notes.md"):
        os.chown(p, 12345, 12345)
    assert script.stat().st_uid == 12345

    d = f"/up-{uid()}"
    asyncio.run(box.upload_file(script, f"{d}/run.sh"))
    asyncio.run(box.upload_file(data, f"{d}/data.txt"))
    asyncio.run(box.upload_dir(src, f"{d}/tree"))
    out = asyncio.run(box.exec(f"cd {d} && stat -c '%n %u %g %a' run.sh data.txt tree/sub/tool tree/notes.md "
                               "tree/sub"))
    assert out.return_code == 0, out.stderr
    stats = {name: (int(u), int(g), mode) for name, u, g, mode in (line.split() for line in out.stdout.splitlines())}
    assert stats["run.sh"] == (0, 0, "755")
    assert stats["data.txt"] == (0, 0, "644")
    assert stats["tree/sub/tool"] == (0, 0, "755")
    assert stats["tree/notes.md"] == (0, 0, "644")
    assert stats["tree/sub"][:2] == (0, 0)
    assert asyncio.run(box.exec(f"{d}/run.sh", user="nobody")).stdout == "hi\n"


# ---- 6. no network --------------------------------------------------------------------


def test_no_network_but_loopback(box):
    """Shown by the sandbox's own tables, never by sending traffic off the machine: only a loopback interface,
    and no route but loopback's."""
    dev = asyncio.run(box.exec("cat /proc/net/dev"))
    interfaces = [line.split(":")[0].strip() for line in dev.stdout.splitlines()[2:] if ":" in line]
    assert interfaces == ["lo"]
    routes = asyncio.run(box.exec("cat /proc/net/route")).stdout.splitlines()[1:]
    assert [r.split()[0] for r in routes if r.strip()] in ([], ["lo"]), routes
    assert not any(r.split()[1] == "00000000" for r in routes if r.strip()), f"a default route: {routes}"


# ---- 7. cpus and memory ------------------------------------------------------------


def test_cpus_and_memory_from_task_toml_are_applied(box):
    assert box.task_env_config.cpus == 1 and box.task_env_config.memory_mb == 300  # as in task.toml
    container = DOCKER.containers.get(box._container.id)
    assert container.status == "running"
    host = container.attrs["HostConfig"]
    assert host["NanoCpus"] == 1_000_000_000
    assert host["Memory"] == 300 * 1024 * 1024
    assert host["NetworkMode"] == "none"


# ---- 8. images: tagged by content hash, built once ------------------------------------


def test_image_is_tagged_by_content_hash_and_built_once(tmp_path, tracker):
    task = make_task(tmp_path / "tasks", "hashed",
                     dockerfile=f"FROM {BASE_IMAGE}\n# build once\nRUN echo {uid()} > /marker && sleep 2\n")
    env_dir = task / "environment"
    tag = sandbox.image_tag(env_dir)
    assert tag == f"amber-env:{environment_content_hash(env_dir)}"
    tracker.images.append(tag)

    def start_stop(name: str) -> tuple[str, float]:
        sb = new_sandbox(task, tracker.session(name), tmp_path / name)
        t0 = time.monotonic()
        try:
            asyncio.run(sb.start(force_build=False))
            return sb.image_id, time.monotonic() - t0
        finally:
            asyncio.run(sb.stop(delete=True))

    with dockerd.watching(DOCKER, type="image", event="tag") as events:
        first_id, first_sec = start_stop("first")
        second_id, second_sec = start_stop("second")
    assert DOCKER.images.get(tag).id == first_id == second_id
    assert second_sec < 2.0 and second_sec < first_sec, (first_sec, second_sec)
    # the engine's own record: the tag was written once, so one build
    tagged = [e for e in events if e.get("Actor", {}).get("Attributes", {}).get("name") == tag]
    assert len(tagged) == 1, tagged

    # one byte changed (a comment: even the layers stay cached) -> another tag
    dockerfile = env_dir / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("# build once", "# build twice"))
    new_tag = sandbox.image_tag(env_dir)
    tracker.images.append(new_tag)
    assert new_tag != tag and new_tag.startswith("amber-env:")
    third_id, _ = start_stop("third")
    assert DOCKER.images.get(new_tag).id == third_id


# ---- 9. a Task whose image does not build ---------------------------------------------


def test_unbuildable_task_is_a_sandbox_build_failure_without_reward(tmp_path, tracker):
    task = make_task(tmp_path / "tasks", "broken", dockerfile=f"FROM {BASE_IMAGE}\nRUN echo {uid()}; false\n")
    tracker.images.append(sandbox.image_tag(task / "environment"))
    name = f"amber-test-broken-{uid()}"
    tracker.sessions.append(f"{name}__env")
    result = run_trial(task, tmp_path / "trials", "oracle", name)
    info = result.exception_info
    assert info is not None
    assert info.exception_type == "SandboxBuildFailedError"
    assert result.verifier_result is None
    message = info.exception_message
    assert "\n" not in message.strip(), message
    assert "does not build" in message and "broken" in message
    outcome = outcomes.from_harbor(result, private=False)
    assert outcome.reward is None and outcome.errored
    assert outcome.error_type == "SandboxBuildFailedError"
    assert containers_of(f"{name}__env") == []


# ---- 10. downloads ------------------------------------------------------------------


def test_download_dir_and_file_round_trip(box, tmp_path):
    src = tmp_path / "src"
    files = {
        "top.txt": b"top\n",
        "with space.txt": b"spaced out\n",
        "a dir/inner file.bin": bytes(range(256)) * 8,
        "a dir/deeper/still deeper/leaf.txt": "ünïcode\n".encode(),
    }
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    d = f"/round trip {uid()}"
    asyncio.run(box.upload_dir(src, d))
    made = asyncio.run(box.exec(f"mkdir -p {shlex.quote(d + '/made inside')} && "
                                f"printf 'from the box' > {shlex.quote(d + '/made inside/x y.txt')}"))
    assert made.return_code == 0, made.stderr
    files["made inside/x y.txt"] = b"from the box"

    back = tmp_path / "back"
    asyncio.run(box.download_dir(d, back))
    got = {p.relative_to(back).as_posix(): p.read_bytes() for p in back.rglob("*") if p.is_file()}
    assert got == files

    one = tmp_path / "one" / "nested" / "copy of spaced.txt"
    asyncio.run(box.download_file(f"{d}/with space.txt", one))
    assert one.read_bytes() == b"spaced out\n"
    deep = tmp_path / "deep.txt"
    asyncio.run(box.download_file(f"{d}/a dir/deeper/still deeper/leaf.txt", deep))
    assert deep.read_bytes() == files["a dir/deeper/still deeper/leaf.txt"]


# ---- 11. round trips: what a stat or one put can do takes no command --------------------


def exec_commands(container_id: str, since: float) -> list[str]:
    """The commands the engine was asked to run in a container since a moment: its own record of exec_create."""
    events = DOCKER.events(since=f"{since:.6f}", until=f"{time.time() + 0.2:.6f}", decode=True,
                           filters={"container": container_id, "event": "exec_create"})
    return [e["Action"].removeprefix("exec_create: ") for e in events]


@pytest.fixture
def fresh(tmp_path, tracker) -> Iterator[AmberSandbox]:
    """A sandbox of its own, just started: nothing has been asked of it yet."""
    task = make_task(tmp_path / "tasks", "fresh")
    sb = new_sandbox(task, tracker.session("fresh"), tmp_path / "trial")
    asyncio.run(sb.start(force_build=False))
    try:
        yield sb
    finally:
        asyncio.run(sb.stop(delete=True))


def stats(sb: AmberSandbox, *paths: str) -> dict[str, str]:
    out = asyncio.run(sb.exec("stat -c '%n %U %a' " + " ".join(shlex.quote(p) for p in paths), user="root"))
    assert out.return_code == 0, out.stderr
    return {line.rsplit(" ", 2)[0]: " ".join(line.rsplit(" ", 2)[1:]) for line in out.stdout.splitlines()}


def test_a_nop_trials_file_work_runs_no_command(fresh, tmp_path):
    """Everything Harbor asks of a sandbox around a nop Agent, but the test script, without one exec: the log
    folders, uploads into folders that are not there yet, empty folders out and in, is_dir, and the bookkeeping
    commands that would change nothing. What they did is then checked by commands."""
    tool = tmp_path / "tests" / "deep" / "tool.sh"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/bash\necho tool\n")
    tool.chmod(0o755)
    (tmp_path / "empty").mkdir()
    since = time.time()

    async def harbors_calls():
        await fresh.download_dir("/logs/agent", tmp_path / "out" / "agent")
        await fresh.upload_dir(tmp_path / "empty", "/logs/agent")
        assert await fresh.is_dir("/logs/artifacts", user="root")
        await fresh.download_dir("/logs/artifacts", tmp_path / "out" / "artifacts")
        gone = await fresh.exec("rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json", user="root")
        await fresh.upload_dir(tmp_path / "tests", "/opt/new/tests")
        await fresh.upload_file(tool, "/opt/also/new/tool.sh")
        await fresh.upload_dir(tmp_path / "empty", "/opt/empty/folder")
        made = await fresh.exec("chmod +x /opt/new/tests/deep/tool.sh", user="root")
        return gone, made

    gone, made = asyncio.run(harbors_calls())
    assert exec_commands(fresh._container.id, since) == []
    assert (gone.return_code, gone.stdout, gone.stderr) == (0, None, None)
    assert made.return_code == 0
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*")) == [
        "agent", "artifacts"]
    assert stats(fresh, "/logs/agent", "/logs/verifier", "/logs/artifacts", "/opt/new", "/opt/new/tests/deep",
                 "/opt/also/new", "/opt/also/new/tool.sh", "/opt/empty/folder") == {
        "/logs/agent": "root 777", "/logs/verifier": "root 777", "/logs/artifacts": "root 777",
        "/opt/new": "root 755", "/opt/new/tests/deep": "root 755", "/opt/also/new": "root 755",
        "/opt/also/new/tool.sh": "root 755", "/opt/empty/folder": "root 755"}
    assert asyncio.run(fresh.exec("/opt/new/tests/deep/tool.sh", user="nobody")).stdout == "tool\n"


def test_bookkeeping_commands_run_when_they_would_change_something(fresh):
    since = time.time()
    setup = asyncio.run(fresh.exec("mkdir -p /w && touch /w/old /w/plain && chmod 644 /w/plain", user="root"))
    assert setup.return_code == 0, setup.stderr
    assert asyncio.run(fresh.exec("rm -f -- /w/old /w/absent", user="root")).return_code == 0
    assert asyncio.run(fresh.exec("chmod +x /w/plain", user="root")).return_code == 0
    # a command the shell does more with than split words always runs
    assert asyncio.run(fresh.exec("rm -f -- /w/absent; touch /w/ran", user="root")).return_code == 0
    # rm -f of a folder fails, as rm says
    refused = asyncio.run(fresh.exec("rm -f -- /logs/agent", user="root"))
    assert refused.return_code != 0 and "directory" in refused.stderr
    assert len(exec_commands(fresh._container.id, since)) == 5
    assert stats(fresh, "/w/plain", "/w/ran")["/w/plain"] == "root 755"
    assert asyncio.run(fresh.exec("test -e /w/old")).return_code == 1


def test_a_log_folder_is_copied_out_once_anything_is_in_it(fresh, tmp_path):
    made = asyncio.run(fresh.exec("mkdir -p /logs/artifacts/sub && echo a > /logs/artifacts/sub/deep.txt && "
                                  "echo b > /logs/agent/top.txt"))
    assert made.return_code == 0, made.stderr
    asyncio.run(fresh.download_dir("/logs/agent", tmp_path / "agent"))
    asyncio.run(fresh.download_dir("/logs/artifacts", tmp_path / "artifacts"))
    assert (tmp_path / "agent" / "top.txt").read_text() == "b\n"
    assert (tmp_path / "artifacts" / "sub" / "deep.txt").read_text() == "a\n"
    # emptied again: its mtime moved, so it is copied, and found empty
    asyncio.run(fresh.exec("rm /logs/agent/top.txt"))
    asyncio.run(fresh.download_dir("/logs/agent", tmp_path / "again"))
    assert list((tmp_path / "again").iterdir()) == []


def test_logs_uploaded_with_the_first_copy_in_are_copied_out(fresh, tmp_path):
    """The log folders go in with the first put, here one of files into them: not empty, though they went in
    with their mtime at the epoch."""
    src = tmp_path / "logs"
    src.mkdir()
    (src / "trajectory.json").write_text("{}")
    asyncio.run(fresh.upload_dir(src, "/logs/agent"))
    asyncio.run(fresh.download_dir("/logs/agent", tmp_path / "back"))
    assert (tmp_path / "back" / "trajectory.json").read_text() == "{}"
    assert stats(fresh, "/logs/agent", "/logs/agent/trajectory.json") == {
        "/logs/agent": "root 777", "/logs/agent/trajectory.json": "root 644"}


def test_is_dir_and_is_file_say_what_test_says(fresh):
    paths = ["/logs/agent", "/logs", "/", "/k/dir", "/k/file", "/k/to-dir", "/k/to-file", "/k/dangling", "/k/absent",
             "/k/file/under"]

    async def kinds():
        return {p: (await fresh.is_dir(p, user="root"), await fresh.is_file(p, user="root")) for p in paths}

    before = asyncio.run(kinds())  # the log folders not yet put in among them
    asyncio.run(fresh.exec("mkdir -p /k/dir && touch /k/file && ln -s /k/dir /k/to-dir && ln -s /k/file /k/to-file "
                           "&& ln -s /nowhere /k/dangling", user="root"))
    truth = {p: tuple(asyncio.run(fresh.exec(f"test -{flag} {p}")).return_code == 0 for flag in "df") for p in paths}
    assert asyncio.run(kinds()) == truth
    assert truth["/k/to-dir"] == (True, False) and truth["/k/to-file"] == (False, True)
    assert {p: before[p] for p in paths[:3]} == {p: truth[p] for p in paths[:3]}


def test_a_stat_of_a_removed_sandbox_fails_as_a_command_would(fresh):
    from docker.errors import NotFound

    DOCKER.containers.get(fresh._container.id).remove(force=True)
    with pytest.raises(NotFound):
        asyncio.run(fresh.is_dir("/logs/agent/absent", user="root"))
    with pytest.raises(NotFound):
        asyncio.run(fresh.exec("rm -f -- /absent", user="root"))


def test_log_folders_the_image_has_keep_what_is_in_them(tmp_path, tracker):
    task = make_task(tmp_path / "tasks", "has-logs", dockerfile=f"FROM {BASE_IMAGE}\nRUN mkdir -p /logs/agent && "
                     f"echo {uid()} > /logs/agent/kept.txt && chmod 700 /logs/agent\n")
    tracker.images.append(sandbox.image_tag(task / "environment"))
    sb = new_sandbox(task, tracker.session("has-logs"), tmp_path / "trial")
    asyncio.run(sb.start(force_build=False))
    try:
        asyncio.run(sb.download_dir("/logs/agent", tmp_path / "agent"))
        assert (tmp_path / "agent" / "kept.txt").is_file()
        assert stats(sb, "/logs/agent", "/logs/verifier")["/logs/agent"] == "root 777"
    finally:
        asyncio.run(sb.stop(delete=True))


def test_sandboxes_after_the_first_connect_without_asking_the_engine(tmp_path, tracker, monkeypatch):
    task = make_task(tmp_path / "tasks", "connect")
    new_sandbox(task, tracker.session("first"), tmp_path / "first")  # learns the engine's API version

    def refuse(*args, **kwargs):
        raise AssertionError("asked the engine again")

    monkeypatch.setattr(sandbox.docker_engine, "connect", refuse)
    sb = new_sandbox(task, tracker.session("second"), tmp_path / "second")
    asyncio.run(sb.start(force_build=False))
    try:
        assert asyncio.run(sb.exec("echo hi")).stdout == "hi\n"
    finally:
        asyncio.run(sb.stop(delete=True))
