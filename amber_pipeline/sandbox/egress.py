"""The egress proxy: the only way out of a sandbox, to the allowlisted hosts alone.

A Benchmark Version may list hosts its Tasks need (the network allowlist).
Sandboxes have no route out (see `network.py`); they are given `HTTP_PROXY` /
`HTTPS_PROXY` pointing at this proxy, which runs on the host, listens on the
sandbox network's gateway, and speaks the HTTP proxy protocol:

- `CONNECT host:port` (HTTPS and any other TCP protocol) -> `200`, then bytes
  are piped both ways, half-closes passed on;
- plain HTTP with an absolute URI (`GET http://host/path HTTP/1.1`) -> the
  request is sent on in origin form with `Host` set from the URI and
  `Connection: close` (one request per upstream connection).

It admits a host only when its name is on the allowlist (exact names and
`*.suffix` wildcards, case-insensitive; `*.example.com` matches subdomains at
any depth, not `example.com` itself; an IP literal only when listed as such)
and answers `403` with a one-line reason otherwise. Names are resolved by the
proxy (an injectable resolver; the system resolver by default) and connected
to by address; an admitted name whose addresses are loopback, link-local,
multicast or unspecified is refused, and so is one resolving to a private
address unless `allow_private=True` (a name on the list must not become a way
into the host or its LAN). An HTTPS client may still send a different SNI or
Host inside an admitted tunnel; the proxy does not look inside TLS.

Bounded: at most `max_connections` clients at once (more get `503`), a request
head must arrive within `header_timeout` and fit in 64 KiB, connecting
upstream gives up after `connect_timeout`, and a connection idle both ways for
`idle_timeout` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

Resolver = Callable[[str], Awaitable[Sequence[str]]]
"""Resolves a host name to IP address strings; raises OSError (or returns nothing) when it cannot."""

_MAX_HEAD = 64 * 1024
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate",
               "te", "trailer", "upgrade", "host"}


# ---- the allowlist --------------------------------------------------------------------------


def _normalize(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host[:-1] if host.endswith(".") else host


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _is_hostname(host: str) -> bool:
    return 0 < len(host) <= 253 and all(_LABEL.fullmatch(label) for label in host.split("."))


class Allowlist:
    """Host names (and IP literals) a sandbox may reach through the egress proxy."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.names: set[str] = set()
        self.suffixes: set[str] = set()
        self.addresses: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
        for raw in patterns:
            pattern = _normalize(raw)
            if (address := _ip(pattern)) is not None:
                self.addresses.add(address)
            elif pattern.startswith("*.") and _is_hostname(pattern[2:]):
                self.suffixes.add(pattern[2:])
            elif _is_hostname(pattern):
                self.names.add(pattern)
            else:
                raise ValueError(f"Not a host name, *.wildcard or IP address on the network allowlist: {raw!r}")

    def admits(self, host: str) -> bool:
        """Whether `host` (a name or IP literal, as a client wrote it) is on the list."""
        host = _normalize(host)
        if (address := _ip(host)) is not None:
            return address in self.addresses
        if not _is_hostname(host):
            return False
        return host in self.names or any(host.endswith("." + suffix) for suffix in self.suffixes)

    def __bool__(self) -> bool:
        return bool(self.names or self.suffixes or self.addresses)


# ---- resolvers and sandbox environment ------------------------------------------------------


async def system_resolver(host: str) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def static_resolver(table: Mapping[str, str | Sequence[str]]) -> Resolver:
    """A resolver from a fixed map of names to addresses (names matched case-insensitively)."""
    entries = {_normalize(name): [value] if isinstance(value, str) else list(value) for name, value in table.items()}

    async def resolve(host: str) -> list[str]:
        return entries.get(_normalize(host), [])

    return resolve


def proxy_env(proxy_url: str, no_proxy: Iterable[str] = ()) -> dict[str, str]:
    """The environment that sends a sandbox's HTTP(S) through `proxy_url`, except to `no_proxy` hosts."""
    bypass = ",".join(dict.fromkeys(["localhost", "127.0.0.1", "::1", *no_proxy]))
    return {"HTTP_PROXY": proxy_url, "HTTPS_PROXY": proxy_url, "http_proxy": proxy_url, "https_proxy": proxy_url,
            "NO_PROXY": bypass, "no_proxy": bypass}


# ---- the proxy -------------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


_STATUS_TEXT = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large",
                502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


class EgressProxy:
    """An HTTP proxy on the host admitting only allowlisted hosts; runs in a background thread.

    `start()` binds `host:port` (port 0 picks a free one) and returns once it
    listens; `url` is then what sandboxes are given. `stop()` closes every
    connection. Also a context manager.
    """

    def __init__(self, allowed_hosts: Iterable[str] | Allowlist, *, host: str = "127.0.0.1", port: int = 0,
                 resolver: Resolver | Mapping[str, str | Sequence[str]] | None = None, allow_private: bool = False,
                 max_connections: int = 128, header_timeout: float = 10.0, connect_timeout: float = 10.0,
                 idle_timeout: float = 300.0) -> None:
        self.allowlist = allowed_hosts if isinstance(allowed_hosts, Allowlist) else Allowlist(allowed_hosts)
        self.host = host
        self.port = port
        if resolver is None:
            self._resolve: Resolver = system_resolver
        elif isinstance(resolver, Mapping):
            self._resolve = static_resolver(resolver)
        else:
            self._resolve = resolver
        self.allow_private = allow_private
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self._active = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> EgressProxy:
        if self._thread is not None:
            raise RuntimeError("The egress proxy is already started")
        self._thread = threading.Thread(target=self._serve, name=f"egress-proxy-{self.host}", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self

    def stop(self) -> None:
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> EgressProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            server = loop.run_until_complete(
                asyncio.start_server(self._handle, self.host, self.port, limit=_MAX_HEAD))
        except BaseException as e:  # noqa: BLE001 - handed to start()
            self._error = e
            self._ready.set()
            loop.close()
            return
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(_shut_down(server))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    # ---- one client ---------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        self._active += 1
        try:
            if self._active > self.max_connections:
                raise _Refused(503, "amber egress proxy: too many connections at once, try again")
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.header_timeout)
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return
            except asyncio.LimitOverrunError:
                raise _Refused(431, "amber egress proxy: request head too large") from None
            method, target, version, headers = _parse_head(head)
            if method == "CONNECT":
                host, port = _authority(target)
                up_reader, upstream = await self._open(host, port)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                url = urlsplit(target)
                if url.scheme.lower() != "http" or not url.hostname:
                    raise _Refused(400, "amber egress proxy: send CONNECT host:port, or an absolute http:// URI")
                try:
                    port = url.port or 80
                except ValueError:
                    raise _Refused(400, "amber egress proxy: bad port in the request URI") from None
                up_reader, upstream = await self._open(url.hostname, port)
                authority = url.netloc.rpartition("@")[2]
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                kept = [f"{name}: {value}" for name, value in headers if name.lower() not in _HOP_BY_HOP]
                upstream.write("\r\n".join([f"{method} {path} {version}", f"Host: {authority}", *kept,
                                            "Connection: close", "", ""]).encode("latin-1"))
            # After a plain HTTP response (Connection: close) the exchange is over, whatever the client holds open.
            await self._relay(reader, writer, up_reader, upstream, tunnel=method == "CONNECT")
        except _Refused as refused:
            log.info("egress proxy refused a request: %s", refused.reason)
            body = (refused.reason + "\n").encode()
            with contextlib.suppress(OSError, RuntimeError):
                writer.write(f"HTTP/1.1 {refused.status} {_STATUS_TEXT[refused.status]}\r\n"
                             f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                             "Connection: close\r\n\r\n".encode() + body)
                await writer.drain()
                # Close gently: a socket closed with unread input sends a reset, which may
                # destroy the answer before the client reads it.
                writer.write_eof()
                with contextlib.suppress(TimeoutError, OSError):
                    await asyncio.wait_for(_discard(reader), 1.0)
        except (OSError, TimeoutError):
            pass
        finally:
            self._active -= 1
            for w in (writer, upstream):
                if w is not None:
                    w.close()

    async def _open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to an admitted host, or raise _Refused saying why not."""
        if not 0 < port < 65536:
            raise _Refused(400, f"amber egress proxy: bad port {port}")
        name = _normalize(host)
        if not self.allowlist.admits(name):
            raise _Refused(403, f"amber egress proxy: {name} is not on this Benchmark Version's network allowlist")
        literal = _ip(name)
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                resolved = await asyncio.wait_for(self._resolve(name), self.connect_timeout)
            except (OSError, TimeoutError, UnicodeError):
                resolved = []
            if not resolved:
                raise _Refused(502, f"amber egress proxy: cannot resolve {name}")
            addresses = [a for a in resolved if self._may_reach(a)]
            if not addresses:
                raise _Refused(403, f"amber egress proxy: {name} resolves only to addresses sandboxes may not reach")
        failure = "no address"
        for address in addresses:
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, port), self.connect_timeout)
            except TimeoutError:
                failure = "timed out"
            except OSError as e:
                failure = e.strerror or type(e).__name__
        status = 504 if failure == "timed out" else 502
        raise _Refused(status, f"amber egress proxy: cannot connect to {name}:{port} ({failure})")

    def _may_reach(self, address: str) -> bool:
        ip = _ip(address.split("%")[0])
        if ip is None:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
            return False
        return ip.is_global or self.allow_private

    async def _relay(self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter,
                     upstream_reader: asyncio.StreamReader, upstream: asyncio.StreamWriter, *, tunnel: bool) -> None:
        """Pipe both ways until both sides have closed (a tunnel) or upstream has (plain HTTP),
        or either side failed, or nothing moved either way for idle_timeout."""
        last = [time.monotonic()]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    last[0] = time.monotonic()
                    dst.write(data)
                    await dst.drain()
            finally:
                with contextlib.suppress(OSError, RuntimeError):
                    if dst.can_write_eof() and not dst.is_closing():
                        dst.write_eof()  # pass the half-close on

        outbound = asyncio.create_task(pipe(client_reader, upstream))
        inbound = asyncio.create_task(pipe(upstream_reader, client))
        tasks = {outbound, inbound}
        try:
            pending = tasks
            while pending:
                wait = self.idle_timeout - (time.monotonic() - last[0])
                if wait <= 0:
                    break
                done, pending = await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                if any(t.exception() is not None for t in done) or (inbound in done and not tunnel):
                    break
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _discard(reader: asyncio.StreamReader, limit: int = 1 << 20) -> None:
    while limit > 0 and (data := await reader.read(65536)):
        limit -= len(data)


async def _shut_down(server: asyncio.Server) -> None:
    """Stop listening and end every connection of the proxy's loop (each handler closes its sockets)."""
    server.close()
    for _ in range(5):  # connections accepted just now reach their handlers (or the handlers end)
        await asyncio.sleep(0)
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for _ in range(5):  # closed transports release their sockets
        await asyncio.sleep(0)


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    if _CONTROL.search(head.decode("latin-1").replace("\r\n", "")):
        raise _Refused(400, "amber egress proxy: control characters in the request head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
        raise _Refused(400, "amber egress proxy: not an HTTP/1.x request")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _Refused(400, "amber egress proxy: malformed header line")
        headers.append((name, value.strip()))
    return parts[0].upper(), parts[1], parts[2], headers


def _authority(target: str) -> tuple[str, int]:
    if target.startswith("["):
        host, _, rest = target[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise _Refused(400, "amber egress proxy: CONNECT needs host:port")
    return host, int(port)
