"""A second Docker engine beside the machine's own, for tests of sandboxes on another engine.

It has everything of its own, all under one short folder of /tmp (unix socket paths are limited to 108 bytes, and
containerd nests sockets under the exec-root): a unix socket, a TCP listener on a free port of 127.0.0.1 that
demands mutual TLS (`servers.tls`), its data-root, exec-root, pidfile, config file, containerd (started by it,
under its exec-root), containerd namespaces and default bridge, an interface of its own made here (`amb<id>`, on
a /24 of 198.18.0.0/15, the range set aside for tests) and deleted after. It adds no iptables rule and leaves IP
forwarding as it is. `ssh_door` adds an sshd on loopback whose sessions reach it, for ssh:// clients.

Never `--bridge none`: a dockerd without a bridge deletes the interface `docker0` on start
(`removeDefaultBridgeInterface` in dockerd 20.10), which is the machine's own engine's, and that engine's builds
and bridged containers then fail ("could not find bridge docker0") until the interface is made again. Nor the
default bridge, which is the primary's `docker0` itself.

The machine's own engine is never touched: `running` refuses a folder whose socket, pidfile, data-root or
exec-root is the primary's, and every signal goes to a pid read from this engine's own pidfile after checking
that it is not the primary's and that its command line names this engine's folder. `kill` is engine death (a
SIGKILL of dockerd and of its containerd; its containers' shims live on). Stopping is SIGTERM, a wait,
then SIGKILL; an engine that died with containers is started once more on its folders so that it stops them
itself (no live-restore), and anything still left is killed by its own pidfile; then whatever is mounted under
the folder is unmounted and the folder removed.

Measured on 2 cores shared with other work (Docker 20.10.24): ready 0.3-0.6 s after exec; loading
amber-base:bookworm (258 MB) from the primary engine through the SDK 8-16 s; stopping 1-3 s (3 s after a death).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker

from servers import tls as tls_material
from servers.ports import free_port

PRIMARY = {"socket": Path("/var/run/docker.sock"), "pidfile": Path("/var/run/docker.pid"),
           "data_root": Path("/var/lib/docker"), "exec_root": Path("/var/run/docker")}
PRIMARY_BRIDGE = "docker0"
READY_TIMEOUT_SEC = 60
STOP_TIMEOUT_SEC = 20


BASE_IMAGE = "amber-base:bookworm"
PRIMARY_BRIDGE = Path("/sys/class/net/docker0")  # the machine's own engine's default bridge


def engines_toml(engine: Dockerd, local_slots: int = 2, slots: int = 2) -> str:
    """An AMBER_SANDBOX_HOSTS file listing the machine's own engine ("local", unless it has no slots) and
    ``engine`` over TLS ("engine2")."""
    local = f'[[engine]]\nname = "local"\nurl = "unix:///var/run/docker.sock"\nslots = {local_slots}\n'
    return f"""
{local if local_slots else ""}
[[engine]]
name = "engine2"
url = "{engine.tcp_url}"
slots = {slots}
tls_ca = "{engine.tls.ca}"
tls_cert = "{engine.tls.client_cert}"
tls_key = "{engine.tls.client_key}"
"""


@contextlib.contextmanager
def watching(client: docker.DockerClient, **filters: str) -> Iterator[list[dict]]:
    """The engine's events that match ``filters`` while the block runs, read as they happen. Asked for afterwards
    (``events(since=..., until=...)``), an engine answers only from the last 256 events it keeps, and the machine's
    own engine passes that many in seconds while the suite's other workers use it."""
    seen: list[dict] = []
    stream = client.events(decode=True, filters=filters)
    reader = threading.Thread(target=lambda: seen.extend(stream), daemon=True)
    reader.start()
    try:
        yield seen
    finally:
        time.sleep(1.0)  # events are sent as the engine makes them; this lets the last ones reach the reader
        stream.close()
        reader.join(timeout=10)


def binary() -> str | None:
    return shutil.which("dockerd")


def primary_pid() -> int | None:
    """The machine's own engine's pid, from its pidfile."""
    return _read_pid(PRIMARY["pidfile"])


def go_settings(pid: int | None) -> dict[str, str]:
    """The Go runtime's settings a dockerd runs with. A second engine is given the machine's own engine's
    (`scripts/setup.sh` starts that one with GOGC), so that it spends what the first does on each copy and
    container."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if pid else []
    except OSError:
        return {}
    pairs = (entry.decode(errors="replace").partition("=") for entry in environ)
    return {key: value for key, _, value in pairs if key in ("GOGC", "GOMEMLIMIT")}


@dataclass
class Dockerd:
    folder: Path
    port: int
    tls: tls_material.TlsFiles
    namespace: str
    started_in: float = 0.0  # seconds from exec to its first answer
    _process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def bridge(self) -> str:
        return f"amb{self.namespace[-8:]}"  # an interface name: at most 15 characters

    @property
    def socket(self) -> Path:
        return self.folder / "d.sock"

    @property
    def pidfile(self) -> Path:
        return self.folder / "pid"

    @property
    def data_root(self) -> Path:
        return self.folder / "data"

    @property
    def exec_root(self) -> Path:
        return self.folder / "x"

    @property
    def unix_url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def tcp_url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        return _read_pid(self.pidfile)

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def client(self, timeout: int = 60) -> docker.DockerClient:
        """A client over its unix socket (for setting it up and checking on it, not what Amber uses)."""
        return docker.DockerClient(base_url=self.unix_url, timeout=timeout)

    def load_image(self, tag: str, source: docker.DockerClient) -> float:
        """Copy an image from another engine (``docker save | docker load``, streamed through the SDK); seconds."""
        started = time.monotonic()
        target = self.client(timeout=300)
        try:
            target.images.load(source.images.get(tag).save(named=True))
        finally:
            target.close()
        return time.monotonic() - started

    def kill(self) -> None:
        """Engine death: SIGKILL its dockerd and its containerd. Its containers' processes live on, as they would
        on a host whose engine crashed, until `stop`."""
        self._signal(signal.SIGKILL)
        self._wait(STOP_TIMEOUT_SEC)
        # Its containerd gets SIGKILL as dockerd dies, but a dockerd started while it is still going would try to
        # reuse it (its pidfile names a live process) and time out.
        containerd = _read_pid(self.exec_root / "containerd" / "containerd.pid")
        deadline = time.monotonic() + STOP_TIMEOUT_SEC
        while containerd is not None and _alive(containerd) and time.monotonic() < deadline:
            _kill_own(containerd, self.folder)
            time.sleep(0.05)
        # Dead but not yet reaped (its parent died first), it still answers kill(pid, 0), which is dockerd's test.
        (self.exec_root / "containerd" / "containerd.pid").unlink(missing_ok=True)

    def start(self) -> None:
        """Start dockerd on this engine's folders and wait until it answers on its socket."""
        _refuse_primary(self)
        if self.alive():
            raise RuntimeError(f"The engine in {self.folder} is running already.")
        stale = self.pid()
        if stale is not None and not _alive(stale):  # left by a killed dockerd
            self.pidfile.unlink()
        config = self.folder / "daemon.json"
        config.write_text("{}\n")
        argv = [binary() or "dockerd",
                "-H", self.unix_url, "-H", self.tcp_url,
                "--tlsverify", "--tlscacert", str(self.tls.ca), "--tlscert", str(self.tls.server_cert),
                "--tlskey", str(self.tls.server_key),
                "--data-root", str(self.data_root), "--exec-root", str(self.exec_root),
                "--pidfile", str(self.pidfile), "--config-file", str(config),
                "--bridge", self.bridge, "--iptables=false", "--ip-masq=false", "--ip-forward=false",
                "--containerd-namespace", self.namespace, "--containerd-plugins-namespace", f"{self.namespace}p"]
        started = time.monotonic()
        with (self.folder / "dockerd.log").open("ab") as log:
            self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, env={**os.environ, **go_settings(primary_pid())})
        deadline = started + READY_TIMEOUT_SEC
        while not self._answers():
            if self._process.poll() is not None or time.monotonic() > deadline:
                tail = (self.folder / "dockerd.log").read_text(errors="replace")[-2000:]
                self.stop_process()
                raise RuntimeError(f"The second dockerd in {self.folder} did not start: {tail}")
            time.sleep(0.05)
        self.started_in = time.monotonic() - started

    def stop_process(self) -> None:
        """SIGTERM (dockerd stops its containers), up to STOP_TIMEOUT_SEC, then SIGKILL."""
        if not self.alive():
            return
        self._signal(signal.SIGTERM)
        if not self._wait(STOP_TIMEOUT_SEC):
            self._signal(signal.SIGKILL)
            self._wait(STOP_TIMEOUT_SEC)

    def stop(self) -> None:
        """Stop it, leave no container, process or mount of it behind, and remove its folder."""
        self.stop_process()
        if self._running_tasks():  # it died with containers: let it stop them itself, as it does on start
            with contextlib.suppress(RuntimeError):
                self.start()
            self.stop_process()
        for pid in self._running_tasks():
            _kill_own(pid, self.folder, by_parent=True)
        _kill_own(_read_pid(self.exec_root / "containerd" / "containerd.pid"), self.folder)
        _unmount_under(self.folder)
        _delete_bridge(self.bridge)
        shutil.rmtree(self.folder, ignore_errors=True)

    # ---- inside ---------------------------------------------------------------------

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        with contextlib.suppress(Exception):
            client = docker.DockerClient(base_url=self.unix_url, timeout=2)
            try:
                return bool(client.ping())
            finally:
                client.close()
        return False

    def _signal(self, signum: int) -> None:
        if self._process is None:
            return
        pid = self.pid() or self._process.pid  # no pidfile yet (or any more): the child this fixture started
        if pid != self._process.pid:
            raise RuntimeError(f"The pidfile {self.pidfile} names {pid}, not the dockerd this fixture started "
                               f"({self._process.pid}): refusing to signal it.")
        _kill_own(pid, self.folder, signum=signum)

    def _wait(self, seconds: float) -> bool:
        if self._process is None:
            return True
        try:
            self._process.wait(seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    def _running_tasks(self) -> list[int]:
        """The pids of its containers' init processes still alive, from containerd's own pidfiles."""
        tasks = self.exec_root / "containerd" / "daemon" / "io.containerd.runtime.v2.task"
        pids = [_read_pid(p) for p in tasks.glob("*/*/init.pid")]
        return [p for p in pids if p is not None and _alive(p)]


@contextlib.contextmanager
def running(tls: tls_material.TlsFiles | None = None) -> Iterator[Dockerd]:
    """A second engine (made TLS material unless given some), yielded ready; stopped and removed after."""
    if binary() is None:
        raise RuntimeError("dockerd is not installed: run `make setup` (it installs Debian's docker.io).")
    folder = Path(tempfile.mkdtemp(prefix="ad", dir="/tmp"))
    engine = Dockerd(folder, free_port(), tls or tls_material.make(folder / "tls"), f"amber{uuid.uuid4().hex[:8]}")
    try:
        _make_bridge(engine.bridge)
        engine.start()
        yield engine
    finally:
        engine.stop()


@dataclass(frozen=True)
class SshDoor:
    """An sshd on loopback whose sessions reach one engine: what `ssh://` needs of a remote host."""

    url: str
    key: Path
    known_hosts: Path


def sshd_binary() -> str | None:
    return shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin")


@contextlib.contextmanager
def ssh_door(engine: Dockerd) -> Iterator[SshDoor]:
    """Debian's openssh-server on a free port of 127.0.0.1 with its own config, host key and authorized key, in the
    engine's folder. Its sessions have DOCKER_HOST set to the engine's socket, so the `docker system dial-stdio`
    of an ssh:// client reaches this engine, not the machine's own. Stopped by its own pidfile."""
    sshd, keygen = sshd_binary(), shutil.which("ssh-keygen")
    if sshd is None or keygen is None:
        raise RuntimeError("sshd is not installed: install Debian's openssh-server.")
    folder = Path(tempfile.mkdtemp(prefix="ssh", dir=engine.folder))  # one of its own: an engine has many doors
    for name in ("host", "client"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", f"amber-test-{name}", "-f",
                        str(folder / name)], check=True, capture_output=True, timeout=30)
    port = free_port()
    (folder / "authorized_keys").write_text((folder / "client.pub").read_text())
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {(folder / 'host.pub').read_text()}")
    pidfile = folder / "sshd.pid"
    (folder / "sshd_config").write_text("\n".join([
        "ListenAddress 127.0.0.1", f"Port {port}", f"HostKey {folder / 'host'}", f"PidFile {pidfile}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}", "AuthenticationMethods publickey",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
        "UsePAM no", "StrictModes no",  # the folder sits under /tmp, which everyone may write
        f"SetEnv DOCKER_HOST={engine.unix_url}", ""]))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder, made by its service
    with (folder / "sshd.log").open("ab") as log:
        process = subprocess.Popen([sshd, "-D", "-e", "-f", str(folder / "sshd_config")], stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_SEC
        while _read_pid(pidfile) != process.pid:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start: {(folder / 'sshd.log').read_text(errors='replace')}")
            time.sleep(0.05)
        user = pwd.getpwuid(os.geteuid()).pw_name
        yield SshDoor(f"ssh://{user}@127.0.0.1:{port}", folder / "client", folder / "known_hosts")
    finally:
        if _read_pid(pidfile) == process.pid and process.poll() is None:
            process.terminate()
        try:
            process.wait(STOP_TIMEOUT_SEC)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_SEC)


def _refuse_primary(engine: Dockerd) -> None:
    ours = {"socket": engine.socket, "pidfile": engine.pidfile, "data_root": engine.data_root,
            "exec_root": engine.exec_root}
    for key, path in ours.items():
        if os.path.realpath(path) == os.path.realpath(PRIMARY[key]):
            raise RuntimeError(f"The second dockerd's {key} {path} is the machine's own engine's: refusing.")
    if engine.bridge == PRIMARY_BRIDGE:
        raise RuntimeError(f"The second dockerd's bridge would be {PRIMARY_BRIDGE}, the machine's own: refusing.")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


def _make_bridge(name: str) -> None:
    """A bridge for the second engine on a /24 of 198.18.0.0/15 that no route of this host uses yet."""
    taken = _ip("-4", "route", "show").stdout
    for _ in range(64):
        net = f"198.{18 + secrets.randbelow(2)}.{secrets.randbelow(256)}"
        if f"{net}." not in taken:
            break
    else:
        raise RuntimeError("No free /24 of 198.18.0.0/15 for the second engine's bridge.")
    _ip("link", "add", "name", name, "type", "bridge")
    try:
        _ip("addr", "add", f"{net}.1/24", "dev", name)
        _ip("link", "set", name, "up")
    except subprocess.CalledProcessError:
        _delete_bridge(name)
        raise


def _delete_bridge(name: str) -> None:
    if name != PRIMARY_BRIDGE and name.startswith("amb"):
        _ip("link", "delete", name, "type", "bridge", check=False)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    """Running and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _kill_own(pid: int | None, folder: Path, *, signum: int = signal.SIGKILL, by_parent: bool = False) -> None:
    """Signal ``pid`` if it is one of this engine's processes: never the primary engine's, and only when its
    command line (for a container's init, its shim's: ``by_parent``) names the engine's folder."""
    if pid is None or not _alive(pid) or pid == primary_pid():
        return
    owner = pid
    if by_parent:
        owner = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    try:
        command = Path(f"/proc/{owner}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return
    if str(folder) not in command or owner == primary_pid():
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
    if by_parent:  # the shim outlives its container's init when no containerd is there to reap it
        time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.kill(owner, signal.SIGKILL)


def _unmount_under(folder: Path) -> None:
    """Unmount what is mounted at or under ``folder``, deepest first (overlays, netns files, the data-root)."""
    prefix = str(folder)
    for _ in range(3):
        points = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
        if not points:
            return
        for point in sorted(points, key=len, reverse=True):
            if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True)
