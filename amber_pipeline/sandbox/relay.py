"""How a sandbox on another host's Docker engine reaches the proxies on this machine: through the engine's API.

A sandbox network (`sandbox.network`) needs the Docker host's firewall and namespaces, so it exists only on an
engine on this machine; and the model and egress proxies listen on this machine's loopback, which no other
host can reach. A sandbox on a remote engine therefore runs in the network namespace of a relay container made
for it on the same engine from the base image: network mode `none`, so loopback only, no route, nothing else to
reach. The relay listens on its loopback at the proxies' own port numbers and carries each connection over its
attached stdin and stdout to the cell run, which opens the matching connection to the proxy on 127.0.0.1. So a
sandbox there sees the proxies at 127.0.0.1:<port>, exactly where they are here, and the only way out of it is
the engine API connection the cell run already holds (mutual TLS or ssh, as `docker_engine` reaches the engine):
no port is opened on either host, and no firewall rule or root on the far host is needed. The proxies still
check every Trial attempt's token, and the sandbox can reach nothing but the ports it was given.

The wire between the relay and the cell run is a stream of frames, `kind (1 byte) | connection (u32) | length
(u32) | data`: `R` the relay listens, `O` a connection was opened to the port in its data (u16), `D` bytes of a
connection, `C` one side of a connection ended (the other side shuts its writing down; a connection is closed
once both sides ended). Docker multiplexes the relay's stdout and stderr on the attach stream; stderr is kept
for the error message of a relay that failed.

The cell run's end is one thread per relay doing all reads and writes of the attach stream (an SSL socket must
not be read and written from two threads at once); the relay's writes to its stdout are serialized by a lock.
Measured on 2 cores (Docker 20.10, the machine's own engine): a relay is up 0.18-0.21 s after `start` is
called, once per Trial; a call through it (a new connection, 2 KB each way, Python's urllib in the sandbox)
takes about 2.1 ms end to end, model calls taking seconds. Tested over TLS and ssh to a second engine
(`tests/test_sandbox_engines.py`, `tests/test_installed_agents.py`).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from collections.abc import Mapping, Sequence

import docker
from docker.errors import APIError, ImageNotFound, NotFound

from amber_pipeline.errors import AmberError

RELAY_IMAGE = "amber-base:bookworm"  # its python3 runs the relay; Task images are built from it on every engine
RELAY_LABEL = "org.amber.relay"  # the session of the sandbox it serves
_FRAME = struct.Struct(">cII")
_STREAM = struct.Struct(">BxxxI")  # Docker's multiplexed attach stream: stream id, size
_READY_TIMEOUT_SEC = 30
_CHUNK = 65536

# The relay itself, run by the base image's python3 with the ports as arguments. Kept small and free of imports
# beyond the standard library: it runs on whatever python3 the base image has.
RELAY_SCRIPT = r"""
import socket, struct, sys, threading
FRAME = struct.Struct(">cII")
out, lock, conns, ended, ids = sys.stdout.buffer, threading.Lock(), {}, set(), iter(range(1, 1 << 32))
def send(kind, cid, data=b""):
    with lock:
        out.write(FRAME.pack(kind, cid, len(data)) + data)
        out.flush()
def end(cid, side):
    with lock:
        ended.add((cid, side))
        done = (cid, "in") in ended and (cid, "out") in ended
        if done:
            ended.discard((cid, "in")); ended.discard((cid, "out"))
    if done:
        conns.pop(cid).close()
def pump(cid, conn):
    try:
        while data := conn.recv(65536):
            send(b"D", cid, data)
    except OSError:
        pass
    send(b"C", cid)
    end(cid, "in")
def serve(listener, port):
    while True:
        conn, _ = listener.accept()
        with lock:
            cid = next(ids)
        conns[cid] = conn
        send(b"O", cid, struct.pack(">H", port))
        threading.Thread(target=pump, args=(cid, conn), daemon=True).start()
for port in map(int, sys.argv[1:]):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    threading.Thread(target=serve, args=(listener, port), daemon=True).start()
send(b"R", 0)
inp = sys.stdin.buffer
def read(n):
    data = inp.read(n)
    if len(data) < n:
        sys.exit(0)
    return data
while True:
    kind, cid, n = FRAME.unpack(read(FRAME.size))
    data = read(n) if n else b""
    conn = conns.get(cid)
    if conn is None:
        continue
    if kind == b"D":
        try:
            conn.sendall(data)
        except OSError:
            pass
    elif kind == b"C":
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        end(cid, "out")
"""


class Relay:
    """One sandbox's relay: its container on the sandbox's engine, and this end of its attach stream.

    `Relay.start(client, ports, labels)` makes and starts the container and returns once it listens; a sandbox
    made with `network_mode=relay.network_mode` then reaches 127.0.0.1:<port> for each of ``ports`` as this
    machine's 127.0.0.1:<port>. `close()` removes the container and ends the thread. Idempotent.
    """

    def __init__(self, container, stream) -> None:
        self.container = container
        self._stream = stream  # kept as long as the relay: the attach connection lives in it and its response
        # unix: a SocketIO, whose socket is read and written directly; TLS: the SSL socket; ssh: paramiko's channel
        self._raw = stream._sock if isinstance(stream, socket.SocketIO) else stream  # type: ignore[attr-defined]
        self._pending = getattr(self._raw, "pending", lambda: 0)  # bytes an SSL socket decrypted but not handed out
        self._conns: dict[int, socket.socket] = {}
        self._ended: set[tuple[int, str]] = set()
        self._selector = selectors.DefaultSelector()
        self._docker_bytes = bytearray()
        self._relay_bytes = bytearray()
        self._stderr = bytearray()
        self._ready = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"relay-{container.short_id}", daemon=True)

    @property
    def network_mode(self) -> str:
        return f"container:{self.container.id}"

    @classmethod
    def start(cls, client: docker.DockerClient, ports: Sequence[int], labels: Mapping[str, str]) -> Relay:
        try:
            container = client.containers.create(
                RELAY_IMAGE, ["python3", "-u", "-c", RELAY_SCRIPT, *map(str, ports)], network_mode="none",
                stdin_open=True, labels=dict(labels), use_config_proxy=False)  # its environment: the image's
        except ImageNotFound:
            raise AmberError(f"The relay image {RELAY_IMAGE} is not on the Docker engine at {client.api.base_url}: "
                             f"load it there (docker save {RELAY_IMAGE} | docker load) before running "
                             "Agents that reach the model proxy on it.") from None
        try:
            # Attached before it starts, so nothing it writes is missed.
            stream = client.api.attach_socket(container.id, params={"stdin": 1, "stdout": 1, "stderr": 1,
                                                                    "stream": 1})
            relay = cls(container, stream)
            relay._thread.start()
            container.start()
            if not relay._ready.wait(_READY_TIMEOUT_SEC):
                raise AmberError(f"The model proxy's relay on {client.api.base_url} did not start within "
                                 f"{_READY_TIMEOUT_SEC} s: {relay._stderr.decode(errors='replace')[-300:]!r}.")
        except BaseException:
            with contextlib.suppress(APIError, NotFound):
                container.remove(force=True)
            raise
        return relay

    def close(self) -> None:
        self._closing.set()
        with contextlib.suppress(APIError, NotFound):
            self.container.remove(force=True)
        with contextlib.suppress(OSError):
            self._raw.close()
        self._thread.join(timeout=10)

    # ---- the cell run's end: one thread -------------------------------------------------------------

    def _loop(self) -> None:
        self._selector.register(self._raw, selectors.EVENT_READ, None)
        try:
            while not self._closing.is_set():
                events = [(None, 0)] if self._pending() else self._selector.select(timeout=0.5)
                for key, _ in events:
                    cid = None if key is None else key.data
                    if cid is None:
                        if not self._from_relay():
                            return
                    else:
                        self._from_proxy(cid)
        except OSError:
            return  # the engine went away or close() closed the stream: the relay's connections end with it
        finally:
            for conn in self._conns.values():
                with contextlib.suppress(OSError):
                    conn.close()
            self._conns.clear()
            self._selector.close()

    def _from_relay(self) -> bool:
        data = self._raw.recv(_CHUNK)
        if not data:
            return False
        self._docker_bytes += data
        while len(self._docker_bytes) >= _STREAM.size:
            stream_id, size = _STREAM.unpack_from(self._docker_bytes)
            if len(self._docker_bytes) < _STREAM.size + size:
                break
            payload = bytes(self._docker_bytes[_STREAM.size:_STREAM.size + size])
            del self._docker_bytes[:_STREAM.size + size]
            if stream_id == 1:
                self._relay_bytes += payload
            else:
                self._stderr = (self._stderr + payload)[-4096:]
        while len(self._relay_bytes) >= _FRAME.size:
            kind, cid, size = _FRAME.unpack_from(self._relay_bytes)
            if len(self._relay_bytes) < _FRAME.size + size:
                break
            payload = bytes(self._relay_bytes[_FRAME.size:_FRAME.size + size])
            del self._relay_bytes[:_FRAME.size + size]
            self._on_frame(kind, cid, payload)
        return True

    def _on_frame(self, kind: bytes, cid: int, payload: bytes) -> None:
        if kind == b"R":
            self._ready.set()
        elif kind == b"O":
            (port,) = struct.unpack(">H", payload)
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError:
                self._send(b"C", cid)  # nothing listens there (any more): the sandbox's connection ends
                return
            conn.settimeout(None)
            self._conns[cid] = conn
            self._selector.register(conn, selectors.EVENT_READ, cid)
        elif (known := self._conns.get(cid)) is not None:
            if kind == b"D":
                with contextlib.suppress(OSError):
                    known.sendall(payload)
            elif kind == b"C":
                with contextlib.suppress(OSError):
                    known.shutdown(socket.SHUT_WR)
                self._end(cid, "in")

    def _from_proxy(self, cid: int) -> None:
        conn = self._conns[cid]
        try:
            data = conn.recv(_CHUNK)
        except OSError:
            data = b""
        if data:
            self._send(b"D", cid, data)
            return
        self._selector.unregister(conn)
        self._send(b"C", cid)
        self._end(cid, "out")

    def _end(self, cid: int, side: str) -> None:
        """One side of a connection ended; once both have, it is closed."""
        self._ended.add((cid, side))
        if {(cid, "in"), (cid, "out")} <= self._ended:
            self._ended -= {(cid, "in"), (cid, "out")}
            conn = self._conns.pop(cid)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(conn)
            conn.close()

    def _send(self, kind: bytes, cid: int, data: bytes = b"") -> None:
        self._raw.sendall(_FRAME.pack(kind, cid, len(data)) + data)
