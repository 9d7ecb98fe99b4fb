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

    since = int(time.time()) - 1
    first_id, first_sec = start_stop("first")
    second_id, second_sec = start_stop("second")
    until = int(time.time()) + 1
    assert DOCKER.images.get(tag).id == first_id == second_id
    assert second_sec < 2.0 and second_sec < first_sec, (first_sec, second_sec)
    # the engine's own record: the tag was written once, so one build
    events = DOCKER.events(since=since, until=until, decode=True, filters={"type": "image", "event": "tag"})
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
