"""What a sandbox can reach: nothing, or the proxies on Amber's machine through a sandbox network or a relay.

- no network at all, unless given a sandbox network (kwargs `amber_network`, the name of a `SandboxNetwork`,
  and optionally `amber_egress_proxy`, the URL of an `EgressProxy` on its gateway): then the container runs on
  that network with its default route removed and no name server (`network.isolate`), and with HTTP(S)_PROXY
  set to the egress proxy and NO_PROXY covering the gateway, where the model proxy listens;
- sandbox networks need the engine's host (its firewall and namespaces), so only an engine on a unix socket
  takes `amber_network`; on another host's engine a sandbox reaches the proxies through a relay instead (kwarg
  `amber_relay`, the ports to carry; `sandbox.relay`), and has no other network.
"""

from __future__ import annotations

import docker

from amber_pipeline.errors import AmberError
from amber_pipeline.sandbox import egress, engines, network, relay
from amber_pipeline.sandbox.container import SandboxContainer


class Connectivity:
    """How one sandbox's container is wired: its network settings, the egress proxy's variables, its sealing."""

    def __init__(self, engine: engines.Engine | None, network_name: str | None, relay_ports: str | None,
                 egress_proxy: str | None) -> None:
        if network_name and engine is not None and not engine.local:
            raise AmberError(f"The sandbox network {network_name} needs an engine on this host, and "
                             f"{engine.name!r} is at {engine.url}: run networked Trials on a unix:// engine.")
        self._network_name = network_name
        self._relay_ports = [int(p) for p in relay_ports.split(",")] if relay_ports else []
        self._egress_proxy = egress_proxy

    def join(self, client: docker.DockerClient, sandbox: SandboxContainer, environment: dict[str, str],
             relay_labels: dict[str, str]) -> tuple[dict, dict[str, str]]:
        """The container's network settings, and ``environment`` with the egress proxy's variables if it has
        one. On a relay, starts the relay (with ``relay_labels``) and gives it to ``sandbox`` to remove."""
        networking: dict = {"network_mode": "none"}
        if self._network_name:
            sandbox_network = network.SandboxNetwork.get(self._network_name, client)
            networking = {"network": sandbox_network.name}
            if self._egress_proxy:
                environment = {**environment, **egress.proxy_env(self._egress_proxy, [sandbox_network.gateway])}
        elif self._relay_ports:
            made = sandbox.keep_relay(relay.Relay.start(client, self._relay_ports, relay_labels))
            networking = {"network_mode": made.network_mode}
            if self._egress_proxy:
                environment = {**environment, **egress.proxy_env(self._egress_proxy)}
        return networking, environment

    def seal(self, container) -> None:
        """Cut a started container on a sandbox network off from all but the network (`network.isolate`)."""
        if self._network_name:
            network.isolate(container)
