"""Sandboxes on several Docker engines: the engines file, TLS and ssh, and Trials on a second engine.

The engines file is checked without Docker: every mistake is refused in one sentence naming the file, the engine
and the fix. The rest runs against a real second dockerd (`servers.dockerd`) with its own sockets, folders and
containerd, listening on 127.0.0.1 with mutual TLS, and the base image copied into it from the machine's own
engine. Nothing is mocked: a Trial on engine 2 goes through Harbor and AmberSandbox over TLS exactly as the trial
runner drives it, and engine death is a SIGKILL of engine 2's dockerd. The machine's own engine is only ever read
(its pid, its containers), never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import shlex
import shutil
import threading
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import requests
from docker.tls import TLSConfig
from servers import dockerd, tls

from amber_pipeline.errors import AmberError
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.sandbox import docker_engine, engines

BASE_IMAGE = dockerd.BASE_IMAGE
TRIAL_DIR_LABEL = "org.amber.trial_dir"
DEMO_TASK = PROJECT_ROOT / "examples" / "demo-bench" / "active-user-emails"
TRIAL_BOUND_SEC = 90  # a Trial whose engine died must end within this (its own timeouts are longer)


def one_sentence(error: AmberError, *parts: str) -> str:
    text = str(error)
    assert "\n" not in text and text.endswith("."), text
    for part in parts:
        assert part in text, f"{part!r} is not in: {text}"
    return text


# ---- the engines file (no Docker) ---------------------------------------------------------------------------


def hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "engines.toml"
    path.write_text(text)
    monkeypatch.setenv("AMBER_SANDBOX_HOSTS", str(path))
    return path


TLS_KEYS = 'tls_ca = "certs/ca.pem"\ntls_cert = "certs/cert.pem"\ntls_key = "certs/key.pem"\n'


def test_unset_is_the_local_engine_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMBER_SANDBOX_HOSTS", raising=False)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert engines.engines() == [engines.Engine("local", "unix:///var/run/docker.sock", 2, "local")]
    monkeypatch.setenv("DOCKER_HOST", "unix:///tmp/other.sock")
    assert engines.engines()[0].url == "unix:///tmp/other.sock"
    assert docker_engine.engine_url() == "unix:///tmp/other.sock"


def test_a_file_of_three_engines_reads_with_paths_relative_to_it(tmp_path, monkeypatch, certs) -> None:
    (certs / "id_ed25519").write_text("key\n")
    path = hosts(tmp_path, monkeypatch, f"""
[[engine]]
name = "local"
url = "unix:///var/run/docker.sock"
slots = 2

[[engine]]
name = "box2"
url = "tcp://10.0.0.5:2376"
slots = 4
pool = "big"
{TLS_KEYS}
[[engine]]
name = "box3"
url = "ssh://amber@10.0.0.6:2222"
slots = 3
pool = "big"
ssh_key = "certs/id_ed25519"
""")
    local, box2, box3 = engines.engines()
    assert (local.name, local.slots, local.pool, local.tls, local.ssh, local.local) == ("local", 2, "local", None,
                                                                                     None, True)
    assert box2.tls == engines.TlsFiles(certs / "ca.pem", certs / "cert.pem", certs / "key.pem")
    assert (box2.pool, box2.local) == ("big", False)
    assert box3.ssh == engines.SshLogin(key=certs / "id_ed25519", known_hosts=None)
    assert engines.pools() == {"local": 2, "big": 7}
    assert engines.named("box3") == box3
    with pytest.raises(AmberError) as refused:
        engines.named("box9")
    one_sentence(refused.value, str(path), "'box9'")


ENGINE = 'name = "box2"\nslots = 2\n'


@pytest.mark.parametrize("text,parts", [
    ('[[engine]]\nname = "box2"\nslots = 2\n', ["'box2'", "has no url", "url ="]),
    ('[[engine]]\nname = "box2"\nurl = "tcp://10.0.0.5:2376"\nslots = 2\n',
     ["'box2'", "tcp:// without tls_ca, tls_cert, tls_key", "plain tcp is refused", "give tls_ca"]),
    ('[[engine]]\nname = "box2"\nurl = "tcp://10.0.0.5:2376"\nslots = 2\ntls_ca = "certs/ca.pem"\n',
     ["'box2'", "without tls_cert, tls_key", "plain tcp is refused"]),
    (f'[[engine]]\nname = "box2"\nurl = "tcp://10.0.0.5:2376"\nslots = 0\n{TLS_KEYS}',
     ["'box2'", "slots = 0", "at least 1"]),
    (f'[[engine]]\nname = "box2"\nurl = "tcp://10.0.0.5:2376"\nslots = "4"\n{TLS_KEYS}',
     ["'box2'", "slots = '4'", "whole number"]),
    ('[[engine]]\nname = "box2"\nurl = "unix:///var/run/docker.sock"\nslots = 2\nslot = 3\n',
     ["'box2'", "unknown key 'slot'", "the keys are name, url, slots"]),
    ('workers = 3\n[[engine]]\nname = "box2"\nurl = "unix:///var/run/docker.sock"\nslots = 2\n',
     ["unknown key 'workers'", "[[engine]]"]),
    ('[[engine]]\nname = "box2"\nurl = "unix:///a.sock"\nslots = 2\n[[engine]]\nname = "box2"\n'
     'url = "unix:///b.sock"\nslots = 1\n', ["two engines 'box2'", "a name of its own"]),
    ('[[engine]]\nname = "a"\nurl = "unix:///a.sock"\nslots = 2\n[[engine]]\nname = "b"\n'
     'url = "unix:///a.sock"\nslots = 1\n', ["'a' and 'b' have the same url", "list each engine once"]),
    (f'[[engine]]\nname = "box2"\nurl = "tcp://10.0.0.5:2376"\nslots = 2\n{TLS_KEYS.replace("key.pem", "nokey.pem")}',
     ["'box2'", "tls_key = 'certs/nokey.pem'", "is not a file"]),
    (f'[[engine]]\nname = "box2"\nurl = "unix:///var/run/docker.sock"\nslots = 2\n{TLS_KEYS}',
     ["'box2'", "TLS files are for tcp:// engines"]),
    ('[[engine]]\nname = "box2"\nurl = "http://10.0.0.5:2375"\nslots = 2\n',
     ["'box2'", "unix://, tcp:// (with TLS) or ssh://"]),
    (f'[[engine]]\nname = "box2"\nurl = "tcp://10.0.0.5"\nslots = 2\n{TLS_KEYS}', ["'box2'", "no port"]),
    ('[[engine]]\nname = "box 2"\nurl = "unix:///a.sock"\nslots = 2\n', ["Engine 1", "no valid name"]),
    ('[[engine]]\nname = "box2"\nurl = "ssh://amber@10.0.0.6"\nslots = 2\nssh_key = "certs/none"\n',
     ["'box2'", "ssh_key = 'certs/none'", "is not a file"]),
    ('[engine]\nname = "box2"\n', ["lists no engine", "[[engine]] tables"]),
    ('[[engine]\nname = "box2"\n', ["is not valid TOML", "fix it"]),
])
def test_every_malformed_engines_file_is_refused_in_one_sentence(tmp_path, monkeypatch, certs, text, parts) -> None:
    path = hosts(tmp_path, monkeypatch, text)
    with pytest.raises(AmberError) as refused:
        engines.engines()
    one_sentence(refused.value, str(path), *parts)


def test_an_engines_file_that_is_not_there_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AMBER_SANDBOX_HOSTS", str(tmp_path / "nowhere.toml"))
    with pytest.raises(AmberError) as refused:
        engines.engines()
    one_sentence(refused.value, "AMBER_SANDBOX_HOSTS", str(tmp_path / "nowhere.toml"), "unset it")


def test_a_sandbox_network_is_refused_on_an_engine_of_another_host(tmp_path, monkeypatch, certs) -> None:
    from amber_pipeline.sandbox.environment import AmberSandbox

    hosts(tmp_path, monkeypatch, f'[[engine]]\nname = "box2"\nurl = "tcp://10.0.0.5:2376"\nslots = 2\n{TLS_KEYS}')
    with pytest.raises(AmberError) as refused:
        AmberSandbox(amber_engine="box2", amber_network="amber-net")
    one_sentence(refused.value, "'box2'", "unix:// engine")


# ---- a second engine -----------------------------------------------------------------------------------------


@pytest.fixture
def on_engine2(engine2: dockerd.Dockerd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> engines.Engine:
    """AMBER_SANDBOX_HOSTS listing the local engine and engine 2 over TLS; engine 2."""
    hosts(tmp_path, monkeypatch, dockerd.engines_toml(engine2))
    return engines.named("engine2")


@pytest.mark.docker
def test_a_client_over_tls_reaches_engine_2_and_one_without_the_client_certificate_is_refused(
        engine2, on_engine2, primary, tmp_path) -> None:
    client = docker_engine.connect(on_engine2)
    assert client.info()["DockerRootDir"] == str(engine2.data_root) != primary.info()["DockerRootDir"]
    assert client.images.get(BASE_IMAGE).id == primary.images.get(BASE_IMAGE).id
    assert docker_engine.answers_within(5, on_engine2)

    no_cert = docker.DockerClient(base_url=engine2.tcp_url, version="1.41", timeout=10,
                                  tls=TLSConfig(ca_cert=str(engine2.tls.ca), verify=True))
    no_cert.api.trust_env = False
    with pytest.raises(requests.exceptions.SSLError):
        no_cert.ping()
    plain = docker.DockerClient(base_url=engine2.tcp_url, version="1.41", timeout=10)
    with pytest.raises(requests.exceptions.RequestException):
        plain.ping()

    stranger = tls.make(tmp_path / "stranger")  # a CA engine 2 never heard of, and a client certificate of it
    foreign = engines.Engine("engine2", engine2.tcp_url, 2, "engine2",
                             engines.TlsFiles(engine2.tls.ca, stranger.client_cert, stranger.client_key))
    with pytest.raises(AmberError) as refused:
        docker_engine.connect(foreign)
    one_sentence(refused.value, "'engine2'", engine2.tcp_url, "TLS")
    doubtful = engines.Engine("engine2", engine2.tcp_url, 2, "engine2",
                              engines.TlsFiles(stranger.ca, engine2.tls.client_cert, engine2.tls.client_key))
    with pytest.raises(AmberError) as refused:
        docker_engine.connect(doubtful)
    one_sentence(refused.value, "'engine2'", "does not verify against tls_ca")


def run_trial(task: Path, trials_dir: Path, agent: str, name: str, engine: str):
    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
    from harbor.trial.trial import Trial

    from amber_pipeline.models.endpoint import offline_litellm

    offline_litellm()
    config = TrialConfig(
        task=TaskConfig(path=task), trials_dir=trials_dir, trial_name=name, agent=AgentConfig(name=agent),
        environment=EnvironmentConfig(import_path="amber_pipeline.sandbox.environment:AmberSandbox",
                                      kwargs={"amber_engine": engine}))

    async def go():
        return await (await Trial.create(config)).run()

    return asyncio.run(go())


class Watch(threading.Thread):
    """Runs a Trial in a thread and records the sandbox containers it makes on each engine while it runs."""

    def __init__(self, clients: dict[str, docker.DockerClient], trial_dir: Path, *run_args) -> None:
        super().__init__(daemon=True)
        self.clients, self.label = clients, f"{TRIAL_DIR_LABEL}={trial_dir.resolve()}"
        self.run_args = run_args
        self.seen: dict[str, dict[str, dict]] = {name: {} for name in clients}  # engine -> id -> inspect
        self.result = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = run_trial(*self.run_args)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            self.error = e

    def look(self) -> None:
        for name, client in self.clients.items():
            try:
                for c in client.containers.list(all=True, filters={"label": self.label}, ignore_removed=True):
                    self.seen[name][c.id] = c.attrs
            except Exception:  # noqa: BLE001 - a dead engine shows nothing
                pass

    def wait_for_container(self, engine: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while not self.seen[engine] and time.monotonic() < deadline and self.is_alive():
            self.look()
            time.sleep(0.2)
        assert self.seen[engine], f"no sandbox appeared on {engine}: {self.error}"
        return next(iter(self.seen[engine].values()))

    def containers_now(self, engine: str) -> list:
        return self.clients[engine].containers.list(all=True, filters={"label": self.label}, ignore_removed=True)


@pytest.mark.docker
def test_a_trial_runs_on_engine_2_over_tls_with_no_mounts_and_leaves_nothing_behind(
        engine2, on_engine2, primary, tmp_path) -> None:
    from amber_pipeline.jobs import outcomes
    from amber_pipeline.sandbox.task_image import image_tag

    tag = image_tag(DEMO_TASK / "environment")
    with contextlib.suppress(docker.errors.ImageNotFound):
        engine2.client().images.remove(tag, force=True)  # so that this Trial builds it, over TLS
    name = f"amber-e2-{uuid.uuid4().hex[:8]}"
    trials = tmp_path / "trials"
    watch = Watch({"engine2": engine2.client(), "primary": primary}, trials / name, DEMO_TASK, trials, "oracle",
                  name, "engine2")
    watch.start()
    attrs = watch.wait_for_container("engine2", 180)
    while watch.is_alive():
        watch.look()
        time.sleep(0.2)
    watch.join()
    assert watch.error is None, watch.error
    outcome = outcomes.from_harbor(watch.result, private=False)
    assert (outcome.kind, outcome.reward) == (outcomes.Kind.SCORED, 1.0), watch.result.exception_info
    assert attrs["Mounts"] == [] and not attrs["HostConfig"].get("Binds")
    assert attrs["HostConfig"]["NetworkMode"] == "none"
    assert watch.seen["primary"] == {}, "the sandbox ran on the machine's own engine"
    assert engine2.client().containers.list(all=True) == [] and watch.containers_now("primary") == []
    assert engine2.client().images.get(tag).labels["org.amber.sandbox"] == "environment"


@pytest.mark.docker
def test_engine_2_dying_mid_trial_ends_it_errored_in_bounded_time_and_spares_the_primary(
        engine2, on_engine2, primary, tmp_path) -> None:
    from amber_pipeline.jobs import outcomes
    from amber_pipeline.sandbox.container import remove_sandboxes_under

    primary_pid = dockerd.primary_pid()
    task = tmp_path / "tasks" / "slow-solution"
    shutil.copytree(DEMO_TASK, task)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nsleep 300\n")
    name = f"amber-e2dead-{uuid.uuid4().hex[:8]}"
    trials = tmp_path / "trials"
    watch = Watch({"engine2": engine2.client()}, trials / name, task, trials, "oracle", name, "engine2")
    watch.start()
    attrs = watch.wait_for_container("engine2", 180)
    container = engine2.client().containers.get(attrs["Id"])
    deadline = time.monotonic() + 60
    while "sleep 300" not in str(container.top()) and time.monotonic() < deadline:  # the oracle is at work
        time.sleep(0.2)
    killed = time.monotonic()
    engine2.kill()
    watch.join(TRIAL_BOUND_SEC)
    ended_in = time.monotonic() - killed
    try:
        assert not watch.is_alive(), f"the Trial was still running {TRIAL_BOUND_SEC} s after its engine died"
        assert watch.error is None, watch.error  # a Trial's failure is its result, not a crash
        outcome = outcomes.from_harbor(watch.result, private=False)
        assert outcome.kind is outcomes.Kind.ERRORED and outcome.retry and outcome.reward is None, outcome
        assert outcome.error_type == "EngineUnreachableError", outcome
        assert outcome.error_message.startswith(f"The Docker engine 'engine2' at {engine2.tcp_url}")
        assert dockerd.primary_pid() == primary_pid and primary.ping()
        assert primary.containers.list(all=True, filters={"label": watch.label}) == []
        with pytest.raises(AmberError) as refused:
            docker_engine.connect(on_engine2)
        one_sentence(refused.value, "'engine2'", engine2.tcp_url, "start it")
        assert not docker_engine.answers_within(1, on_engine2)
    finally:
        engine2.start()  # back for the next test; it stops what the dead engine left running
    # What a dead engine held stays on it until it answers again; the next run of the cell removes it then.
    assert [c.id for c in watch.containers_now("engine2")] == [attrs["Id"]]
    assert remove_sandboxes_under(trials, on_engine2) == [attrs["Id"]]
    assert watch.containers_now("engine2") == []
    print(f"engine 2 died; the Trial ended {ended_in:.1f} s later")


@pytest.mark.docker
def test_a_sandbox_runs_on_engine_2_over_ssh(engine2, primary, tmp_path, monkeypatch) -> None:
    from harbor.models.task.config import TaskConfig as TaskToml
    from harbor.models.trial.paths import TrialPaths

    from amber_pipeline.sandbox.container import SANDBOX_LABEL
    from amber_pipeline.sandbox.environment import AmberSandbox

    with engine_2_by("ssh", engine2, tmp_path, monkeypatch) as name:
        engine = engines.named(name)
        with contextlib.closing(docker_engine.connect(engine)) as client:
            assert client.info()["DockerRootDir"] == str(engine2.data_root)
        session = f"amber-e2ssh-{uuid.uuid4().hex[:8]}"
        (tmp_path / "trial").mkdir()
        sandbox = AmberSandbox(environment_dir=DEMO_TASK / "environment", environment_name="ssh2",
                               session_id=session, trial_paths=TrialPaths(tmp_path / "trial"),
                               task_env_config=TaskToml.model_validate(tomllib.loads(
                                   (DEMO_TASK / "task.toml").read_text())).environment, amber_engine="ssh2")
        asyncio.run(sandbox.start(force_build=False))
        try:
            result = asyncio.run(sandbox.exec("head -c 1 /app/users.json"))
            assert (result.return_code, result.stdout) == (0, (DEMO_TASK / "environment" / "users.json").read_text()[0])
            (made,) = engine2.client().containers.list(filters={"label": f"{SANDBOX_LABEL}={session}"})
            assert made.attrs["Mounts"] == []
        finally:
            asyncio.run(sandbox.stop(delete=True))
        assert engine2.client().containers.list(all=True, filters={"label": f"{SANDBOX_LABEL}={session}"}) == []
        assert primary.containers.list(all=True, filters={"label": f"{SANDBOX_LABEL}={session}"}) == []


class _Reverser(http.server.BaseHTTPRequestHandler):
    """Answers a POST with its body reversed: a relayed byte lost, duplicated or reordered shows."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[::-1])

    def log_message(self, *args: object) -> None:
        pass


RELAYED_CALLS = """
import concurrent.futures, json, os, socket, sys, urllib.error, urllib.request
proxy, reverser = sys.argv[1:]
try:
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{proxy}/v1/chat/completions",
        data=b'{"model": "m", "messages": []}', headers={"Content-Type": "application/json"}))
    status = 200
except urllib.error.HTTPError as e:
    status, said = e.code, json.loads(e.read())
def one(i):
    body = os.urandom(200_000 + i)
    got = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{reverser}/", data=body)).read()
    return got == body[::-1]
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    intact = sum(pool.map(one, range(16)))
routes = [line.split()[1] for line in open("/proc/net/route").read().splitlines()[1:]]
print(json.dumps({"status": status, "said": said, "intact": intact, "routes": routes,
                  "interfaces": [name for _, name in socket.if_nameindex()]}))
"""


@contextlib.contextmanager
def engine_2_by(way: str, engine2: dockerd.Dockerd, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """AMBER_SANDBOX_HOSTS listing engine 2 reached ``way`` ("tls" or "ssh"); the engine's name."""
    if way == "tls":
        hosts(tmp_path, monkeypatch, dockerd.engines_toml(engine2))
        yield "engine2"
        return
    if dockerd.sshd_binary() is None:  # optional: setup installs it only where ssh:// engines are wanted
        pytest.skip("ssh:// is tested with Debian's openssh-server, which is not installed.")
    with dockerd.ssh_door(engine2) as door:
        hosts(tmp_path, monkeypatch, f'[[engine]]\nname = "ssh2"\nurl = "{door.url}"\nslots = 1\n'
                                     f'ssh_key = "{door.key}"\nssh_known_hosts = "{door.known_hosts}"\n')
        yield "ssh2"


@pytest.mark.docker
@pytest.mark.parametrize("way", ["tls", "ssh"])
def test_a_sandbox_on_engine_2_reaches_this_machines_proxies_through_its_relay_and_nothing_else(
        way, engine2, primary, tmp_path, monkeypatch) -> None:
    """The model proxy listens on this machine's loopback; a sandbox on engine 2 reaches it, and a second port,
    at 127.0.0.1 through its relay over the connection to engine 2 (TLS, or ssh), many connections at once and
    every byte intact, and the proxy still asks for a Trial's token. The sandbox has loopback alone and no route;
    the relay runs on engine 2 with no network, and both are gone after the Trial."""
    from harbor.models.task.config import TaskConfig as TaskToml
    from harbor.models.trial.paths import TrialPaths

    from amber_pipeline.models.proxy import ModelProxy
    from amber_pipeline.sandbox.container import SANDBOX_LABEL
    from amber_pipeline.sandbox.environment import AmberSandbox
    from amber_pipeline.sandbox.relay import RELAY_LABEL

    reverser = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Reverser)
    threading.Thread(target=reverser.serve_forever, args=(0.05,), daemon=True).start()
    session = f"amber-relay-{uuid.uuid4().hex[:8]}"
    (tmp_path / "trial").mkdir()
    try:
        with engine_2_by(way, engine2, tmp_path, monkeypatch) as engine, ModelProxy() as proxy:
            ports = [proxy.port("127.0.0.1"), reverser.server_address[1]]
            sandbox = AmberSandbox(environment_dir=DEMO_TASK / "environment", environment_name="relay2",
                                   session_id=session, trial_paths=TrialPaths(tmp_path / "trial"),
                                   task_env_config=TaskToml.model_validate(tomllib.loads(
                                       (DEMO_TASK / "task.toml").read_text())).environment,
                                   amber_engine=engine, amber_relay=",".join(map(str, ports)))
            asyncio.run(sandbox.start(force_build=False))
            try:
                command = f"python3 -c {shlex.quote(RELAYED_CALLS)} {ports[0]} {ports[1]}"
                result = asyncio.run(sandbox.exec(command, timeout_sec=120))
                assert result.return_code == 0, result.stderr
                seen = json.loads(result.stdout or "")
                (made,) = engine2.client().containers.list(filters={"label": f"{SANDBOX_LABEL}={session}"})
                (relay,) = engine2.client().containers.list(filters={"label": f"{RELAY_LABEL}={session}"})
            finally:
                asyncio.run(sandbox.stop(delete=True))
    finally:
        reverser.shutdown()
        reverser.server_close()
    assert seen["status"] == 401 and "Trial token" in seen["said"]["error"]["message"], seen
    assert seen["intact"] == 16
    assert seen["routes"] == [] and seen["interfaces"] == ["lo"]
    assert made.attrs["HostConfig"]["NetworkMode"] == f"container:{relay.id}"
    assert relay.attrs["HostConfig"]["NetworkMode"] == "none"
    assert made.attrs["Mounts"] == [] and relay.attrs["Mounts"] == []
    for engine in (engine2.client(), primary):
        for label in (SANDBOX_LABEL, RELAY_LABEL):
            assert engine.containers.list(all=True, filters={"label": f"{label}={session}"}) == []
