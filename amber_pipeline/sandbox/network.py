"""The network of Amber's sandboxes: reaches the host's proxies and nothing else.

A `SandboxNetwork` is an internal Docker bridge network made for one cell run
(one network per cell run is the intended use). Sandboxes on it reach exactly
the host ports opened with `allow_host_port` on the network's `gateway` address
(the model proxy and the egress proxy listen there) and nothing else:

- `internal=True`: Docker drops every packet the bridge would forward off the
  network, and the embedded DNS has no way out, so public names do not resolve;
- `com.docker.network.bridge.enable_icc=false`: sandboxes on the same network
  (the Trials of one cell run) cannot reach each other;
- a host firewall guard (iptables chain `AMBER-<network id>` on INPUT for the
  bridge): on Docker 20.10 an internal network still gives its containers a
  default route via the gateway, and a packet for ANY address of the host (its
  LAN address, the default bridge's address, ...) arriving on the bridge is
  delivered locally, not forwarded, so Docker's internal rules do not stop it:
  without the guard every host service on any address is open to sandboxes.
  The guard admits TCP to `gateway:port` for the allowed ports alone and
  rejects all else; IPv6 is switched off on the bridge for the same reason;
- `isolate(container)` takes the (useless) default route out of a sandbox
  after it starts, so off-network destinations fail at once with "network
  unreachable" rather than being dropped, and points its name lookups at
  nothing, so they fail at once rather than after Docker's 20 s.

The guard and the route removal need root on the Docker host (iptables,
nsenter, a sysctl) and a local engine; without them `create` raises an
AmberError rather than run sandboxes less isolated than promised.

Cost, measured on 2 cores with Docker 20.10 (iptables 1.8 on nf_tables):
`create` takes 0.1-0.4 s, typically 0.15 s (the network alone ~0.07 s, the
rest is a handful of iptables calls), `remove` ~0.18 s, and removing a
sandbox's default route ~30 ms per sandbox start.
Docker's default address pools give about 30 bridge networks at a time on one
engine (15 /16s of 172.16.0.0/12 and 16 /20s of 192.168.0.0/16, minus those in
use), which bounds how many cell runs can hold a network at once.

Networks carry the label `org.amber.network=<name>` (plus any labels the
caller adds), so `remove_sandbox_networks` finds the ones a killed run left.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

import docker
from docker.errors import APIError, NotFound

from amber_pipeline.errors import AmberError
from amber_pipeline.sandbox import docker_engine

NETWORK_LABEL = "org.amber.network"
ICC_OPTION = "com.docker.network.bridge.enable_icc"
BRIDGE_NAME_OPTION = "com.docker.network.bridge.name"
_CHAIN_PREFIX = "AMBER-"
_COMMAND_TIMEOUT = 30


class SandboxNetwork:
    """One internal Docker bridge network for the sandboxes of a cell run.

    Make it with `SandboxNetwork.create(name)` (idempotent: a second call with the
    same name returns the same network); `name` and `gateway` tell sandboxes and
    proxies where to go; `remove()` takes it away with its firewall guard.
    """

    def __init__(self, network, client: docker.DockerClient) -> None:
        self._network = network
        self._client = client
        config = (network.attrs.get("IPAM") or {}).get("Config") or []
        if not config or not config[0].get("Gateway"):
            raise AmberError(f"The Docker network {network.name} has no IPv4 gateway: remove it and try again.")
        self.name: str = network.name
        self.id: str = network.id
        self.gateway: str = config[0]["Gateway"]
        self.subnet: str = config[0]["Subnet"]
        options = network.attrs.get("Options") or {}
        self.bridge: str = options.get(BRIDGE_NAME_OPTION) or f"br-{network.id[:12]}"
        self.chain: str = f"{_CHAIN_PREFIX}{network.id[:12]}"

    # ---- making and finding ----------------------------------------------------

    @classmethod
    def create(cls, name: str, *, labels: Mapping[str, str] | None = None,
               client: docker.DockerClient | None = None) -> SandboxNetwork:
        """The internal network `name`, made (with its host guard) unless it exists already."""
        client = client or docker_engine.connect()
        existing = _network_named(client, name)
        made = existing is None
        if existing is None:
            try:
                existing = client.networks.create(
                    name, driver="bridge", internal=True, check_duplicate=True,
                    options={ICC_OPTION: "false"}, labels={**(labels or {}), NETWORK_LABEL: name})
            except APIError:
                existing = _network_named(client, name)  # made meanwhile by another process
                if existing is None:
                    raise
                made = False
            existing.reload()
        net = cls(existing, client)
        net._check_isolated()
        try:
            net._guard_host()
        except BaseException:
            if made:
                with contextlib.suppress(APIError, NotFound):
                    existing.remove()
            raise
        return net

    @classmethod
    def get(cls, name: str, client: docker.DockerClient | None = None) -> SandboxNetwork:
        """The existing Amber network `name` (no changes made)."""
        client = client or docker_engine.connect()
        network = _network_named(client, name)
        if network is None:
            raise AmberError(f"There is no Docker network named {name}: create it with SandboxNetwork.create.")
        net = cls(network, client)
        net._check_isolated()
        return net

    def _check_isolated(self) -> None:
        attrs = self._network.attrs
        if (attrs.get("Labels") or {}).get(NETWORK_LABEL) != self.name or not attrs.get("Internal") \
                or (attrs.get("Options") or {}).get(ICC_OPTION) != "false":
            raise AmberError(f"The Docker network {self.name} exists but is not an isolated Amber sandbox "
                             "network: remove it or choose another name.")

    # ---- the host guard ------------------------------------------------------------

    def allow_host_port(self, port: int) -> None:
        """Let sandboxes reach TCP `gateway:port` on the host (where a proxy listens). Idempotent."""
        rule = ["-p", "tcp", "-d", self.gateway, "--dport", str(int(port)), "-j", "ACCEPT"]
        if not _iptables_ok("-C", self.chain, *rule):
            _iptables("-I", self.chain, "1", *rule)

    def allowed_host_ports(self) -> list[int]:
        """The host ports sandboxes on this network may reach, from the guard itself."""
        out = _iptables("-S", self.chain)
        ports = []
        for line in out.splitlines():
            words = line.split()
            if "ACCEPT" in words and "--dport" in words:
                ports.append(int(words[words.index("--dport") + 1]))
        return sorted(ports)

    def _guard_host(self) -> None:
        if not _iptables_ok("-S", self.chain):
            _iptables("-N", self.chain)
        if not _iptables_ok("-C", self.chain, "-j", "REJECT"):
            _iptables("-A", self.chain, "-j", "REJECT")
        if not _iptables_ok("-C", "INPUT", "-i", self.bridge, "-j", self.chain):
            _iptables("-I", "INPUT", "1", "-i", self.bridge, "-j", self.chain)
        _disable_ipv6(self.bridge)

    # ---- removal --------------------------------------------------------------------

    def remove(self) -> None:
        """Remove the network (disconnecting any container still on it) and its host guard. Idempotent."""
        try:
            self._network.reload()
            for container_id in (self._network.attrs.get("Containers") or {}):
                with contextlib.suppress(APIError, NotFound):
                    self._network.disconnect(container_id, force=True)
            self._network.remove()
        except NotFound:
            pass
        _remove_guard(self.chain, self.bridge)

    def __enter__(self) -> SandboxNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # ---- what a sandbox on it is given -------------------------------------------------

    def sandbox_kwargs(self, egress_proxy_url: str | None = None) -> dict[str, str]:
        """The kwargs of `EnvironmentConfig(import_path=..., kwargs=...)` that put AmberSandbox on this network."""
        kwargs = {"amber_network": self.name}
        if egress_proxy_url:
            kwargs["amber_egress_proxy"] = egress_proxy_url
        return kwargs

    def __repr__(self) -> str:
        return f"SandboxNetwork(name={self.name!r}, gateway={self.gateway!r})"


def isolate(container) -> None:
    """Seal a started sandbox on a sandbox network: no default route, and no name server to ask.

    A sandbox needs no names: the proxies are reached by address, and allowlisted
    hosts by name through the egress proxy, which resolves them on the host. Docker's
    embedded DNS on an internal network tries its upstream servers for every lookup
    and answers only after 20 s, which stalls Agents that look a name up (Codex
    CLI's telemetry, for one) for that long; a name server at the sandbox's own
    loopback, where nothing listens, makes every lookup fail at once instead.
    """
    remove_default_route(container)
    resolv = container.attrs.get("ResolvConfPath")
    if not resolv or not Path(resolv).is_file():
        raise AmberError(f"Cannot reach the name server settings of sandbox {container.name}: Amber must run as "
                         "root on the Docker host to isolate sandboxes on a network.")
    Path(resolv).write_text("# Amber: sandboxes resolve no names\nnameserver 127.0.0.1\noptions attempts:1\n")


def remove_default_route(container) -> None:
    """Take the default routes out of a started container's network namespace, from the host.

    Docker 20.10 gives containers on an internal network a default route via the
    gateway; Docker drops what goes that way, but without the route a sandbox
    cannot even try. Raises AmberError when it cannot be done (no root, remote engine).
    """
    container.reload()
    pid = container.attrs.get("State", {}).get("Pid") or 0
    netns = Path(f"/proc/{pid}/ns/net")
    if not pid or not netns.exists():
        raise AmberError(f"Cannot reach the network namespace of sandbox {container.name}: Amber must run as root "
                         "on the Docker host to isolate sandboxes on a network.")
    for family in ("-4", "-6"):
        for _ in range(8):  # one route per metric at most; a handful at worst
            if not _nsenter(netns, "ip", family, "route", "show", "default").strip():
                break
            _nsenter(netns, "ip", family, "route", "del", "default")
        else:
            raise AmberError(f"The default route of sandbox {container.name} could not be removed.")


def remove_sandbox_networks(labels: Mapping[str, str] | None = None,
                            client: docker.DockerClient | None = None) -> list[str]:
    """Remove Amber's sandbox networks (those with all of `labels`, if given) and their host guards.

    Also drops guards whose network is already gone. Returns the removed networks' names.
    """
    client = client or docker_engine.connect()
    filters = [NETWORK_LABEL] + [f"{k}={v}" for k, v in (labels or {}).items()]
    removed = []
    for network in client.networks.list(filters={"label": filters}):
        with contextlib.suppress(NotFound):
            network.reload()
            SandboxNetwork(network, client).remove()
            removed.append(network.name)
    # The guards first, the networks after: a network is made before its guard, so a guard read here whose
    # network is missing from the later list lost its network. Listed the other way round, a network made
    # between the two reads would have its guard removed while its sandboxes run.
    chains = [words[1] for words in map(str.split, _iptables_text("-S"))
              if words[:1] == ["-N"] and words[1].startswith(_CHAIN_PREFIX)]
    live = {n.id[:12] for n in client.networks.list()}
    for chain in chains:
        if chain[len(_CHAIN_PREFIX):] not in live:
            _remove_guard(chain, None)
    return removed


# ---- helpers --------------------------------------------------------------------------


def _network_named(client: docker.DockerClient, name: str):
    # Docker's name filter matches substrings: keep the exact name only.
    matches = [n for n in client.networks.list(names=[name]) if n.name == name]
    if not matches:
        return None
    network = matches[0]
    network.reload()
    return network


def _tool(name: str) -> str:
    path = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if Path(p).exists()), None)
    if path is None:
        raise AmberError(f"`{name}` is missing on this host: install it (iptables, iproute2, util-linux) to "
                         "run sandboxes on an isolated network.")
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT, check=False)


def _iptables_ok(*args: str) -> bool:
    return _run(_tool("iptables"), "-w", *args).returncode == 0


def _iptables(*args: str) -> str:
    done = _run(_tool("iptables"), "-w", *args)
    if done.returncode != 0:
        _iptables_failed(args, done)
    return done.stdout


def _iptables_failed(args: tuple[str, ...], done: subprocess.CompletedProcess) -> NoReturn:
    raise AmberError(f"iptables {' '.join(args)} failed ({done.stderr.strip()}): Amber must run as root on "
                     "the Docker host to guard the host from sandboxes.")


def _iptables_text(*args: str) -> list[str]:
    done = _run(_tool("iptables"), "-w", *args)
    return done.stdout.splitlines() if done.returncode == 0 else []


def _remove_guard(chain: str, bridge: str | None) -> None:
    for line in _iptables_text("-S", "INPUT"):
        words = line.split()
        if words[:2] == ["-A", "INPUT"] and words[-2:] == ["-j", chain] and (bridge is None or bridge in words):
            _run(_tool("iptables"), "-w", "-D", *words[1:])
    # A network's owner and a sweep of left guards may remove the same guard at once: a chain gone between
    # the steps is removed, not an error.
    for step in ("-F", "-X"):
        done = _run(_tool("iptables"), "-w", step, chain)
        if done.returncode != 0:
            if not _iptables_ok("-S", chain):
                return
            _iptables_failed((step, chain), done)


def _disable_ipv6(bridge: str) -> None:
    # A sandbox may craft IPv6 frames to the bridge's link-local address; the IPv4 guard would not see them.
    setting = Path(f"/proc/sys/net/ipv6/conf/{bridge}/disable_ipv6")
    for _ in range(50):  # the bridge appears a moment after the network
        if setting.exists():
            break
        time.sleep(0.02)
    if not setting.exists():
        if Path("/proc/sys/net/ipv6").exists() and not Path(f"/sys/class/net/{bridge}").exists():
            raise AmberError(f"The bridge {bridge} of a sandbox network is not on this host: Amber must run on "
                             "the Docker host to isolate sandboxes on a network.")
        return  # no IPv6 on this host
    try:
        if setting.read_text().strip() != "1":
            setting.write_text("1\n")
    except OSError as e:
        raise AmberError(f"Cannot switch IPv6 off on {bridge} ({e}): Amber must run as root on the Docker host "
                         "to guard the host from sandboxes.") from None


def _nsenter(netns: Path, *command: str) -> str:
    done = _run(_tool("nsenter"), f"--net={netns}", _tool(command[0]), *command[1:])
    if done.returncode != 0:
        raise AmberError(f"{' '.join(command)} in a sandbox's network namespace failed ({done.stderr.strip()}): "
                         "Amber must run as root on the Docker host to isolate sandboxes on a network.")
    return done.stdout

