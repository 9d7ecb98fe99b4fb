"""The Docker engines that run sandboxes: one place that connects to them.

An engine (`engines.Engine`) is reached over its unix socket; over tcp:// with mutual TLS, the client showing
a certificate signed by the engine's CA and checking the engine's against that CA (never plain tcp); or over
ssh:// through paramiko, the remote end running `docker system dial-stdio` (so it needs the docker CLI). With
no engine named, the client reaches DOCKER_HOST or the local socket, as it always has.

A dead engine is the commonest thing a user can fix, so connecting turns the SDK's long exception into one
sentence naming the engine and the fix; and a call to a named engine that stopped answering raises
`EngineUnreachableError`, naming it, so a Trial it cut short reads as the sandbox's failure.

Costs measured on 2 cores against a second dockerd on loopback: a first connect takes about 25 ms over the
socket, 40 ms over TLS and 350 ms over ssh (a login); an exec's round trips about 0.08-0.09 s over the socket or
TLS and 0.3 s over ssh, where every exec's stream opens an ssh session of its own (a `docker system dial-stdio`
on the far side). So ssh suits engines whose Trials run few commands, and the far sshd's MaxSessions (10 by
default) bounds how many calls one client makes at once.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import docker
import paramiko
import requests
from docker.errors import DockerException
from docker.tls import TLSConfig
from docker.transport import SSHHTTPAdapter

from amber_pipeline import settings
from amber_pipeline.errors import AmberError
from amber_pipeline.sandbox import engines
from amber_pipeline.sandbox.engines import Engine, SshLogin

# What failing to reach an engine raises: the SDK's own error, requests' (a client that was given the API version
# asks nothing until its first call), paramiko's (login, host key) and the socket's.
UNREACHABLE = (DockerException, requests.RequestException, paramiko.SSHException, OSError)
_SSH_CONNECT_TIMEOUT_SEC = 20
_PLACEHOLDER_VERSION = "1.24"  # never used for a call: replaced by the engine's own before the first one


class EngineUnreachableError(requests.exceptions.ConnectionError):
    """A call to a named engine that could not reach it: the engine died, is restarting, or its host is gone. Its
    message names the engine; the SDK's error is its cause. It is the sandbox's failure, never the Task's or the
    Agent's, and is still a ConnectionError to whoever catches one."""


def engine_url() -> str:
    """The URL of the engine a client with no engine named reaches."""
    return engines.local_url()


def client(engine: Engine | None = None, *, version: str | None = None, timeout: int = 120) -> docker.DockerClient:
    """A client for ``engine`` (None: DOCKER_HOST or the local socket). Given the engine's API ``version`` it asks
    the engine nothing (an ssh:// engine still logs in); without it, it asks (one round trip), raising one of
    ``UNREACHABLE`` when the engine does not answer."""
    if engine is None:
        return docker.DockerClient(base_url=engine_url(), version=version, timeout=timeout)
    if engine.tls is None and engine.ssh is None:
        made = docker.DockerClient(base_url=engine.url, version=version, timeout=timeout)
        _name_the_engine(made, engine)
        return made
    if engine.tls is not None:
        tls = TLSConfig(client_cert=(str(engine.tls.cert), str(engine.tls.key)), ca_cert=str(engine.tls.ca),
                        verify=True)
        made = docker.DockerClient(base_url=engine.url, tls=tls, version=version or _PLACEHOLDER_VERSION,
                                   timeout=timeout)
        # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace the session's CA (psf/requests#3829), and
        # the engine's certificate is signed by its own CA, which no bundle holds: only tls_ca may vouch for it.
        made.api.trust_env = False
    else:
        made = _ssh_client(engine, version, timeout)
    if version is None:
        made.api._version = made.api.version(api_version=False)["ApiVersion"]
    _name_the_engine(made, engine)
    return made


def connect(engine: Engine | None = None, timeout: int = 120) -> docker.DockerClient:
    """A client for ``engine`` (None: DOCKER_HOST or the local socket) that answers a ping."""
    try:
        made = client(engine, timeout=timeout)
        made.ping()
    except UNREACHABLE as e:
        raise AmberError(_not_answering(engine, e)) from None
    return made


def answers_within(seconds: float, engine: Engine | None = None) -> bool:
    """Wait until the engine answers a ping (a restarting engine takes seconds); False if not within
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            made = client(engine, timeout=5)
            try:
                made.ping()
                return True
            finally:
                made.close()
        except UNREACHABLE:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)


def _name_the_engine(made: docker.DockerClient, engine: Engine) -> None:
    """Make every call that cannot reach the engine raise EngineUnreachableError naming it, so a Trial whose engine
    died says which engine, and is told apart from a Task's or an Agent's failure by its type. A TLS refusal is
    not a lost engine and keeps its own error."""
    send = made.api.send

    def send_or_name(request, **kwargs):
        try:
            return send(request, **kwargs)
        except requests.exceptions.SSLError:
            raise
        except (requests.exceptions.ConnectionError, paramiko.SSHException) as e:
            raise EngineUnreachableError(f"The Docker engine {engine.name!r} at {engine.url}{_listed_in()} stopped "
                                         "answering, and the sandbox with it: restart it or take it out of the "
                                         "engines file.", request=request) from e

    made.api.send = send_or_name  # type: ignore[method-assign]


def _not_answering(engine: Engine | None, error: BaseException) -> str:
    if engine is None:
        return (f"The Docker engine at {engine_url()} is not answering: start it "
                "(as root on Debian, `make setup` installs and starts one) and try again.")
    text = str(error)
    if isinstance(error, paramiko.AuthenticationException):
        fix = "its ssh login was refused: give ssh_key a key the host's authorized_keys holds"
    elif isinstance(error, paramiko.SSHException) and "known_hosts" in text:
        fix = "its ssh host key is not known: add it to ssh_known_hosts (ssh-keyscan) after checking it"
    elif isinstance(error, paramiko.SSHException) and "private key" in text:
        fix = "ssh_key is not a private key it can read: give an OpenSSH key file without a passphrase"
    elif isinstance(error, paramiko.SSHException):
        fix = f"its ssh login failed ({text}): check the url and that the host runs sshd and the docker CLI"
    elif "CERTIFICATE_VERIFY_FAILED" in text:
        fix = "its TLS certificate does not verify against tls_ca: give the CA that signed the engine's certificate"
    elif "SSL" in text or "TLS" in text:
        fix = "it refused the TLS handshake: give tls_cert and tls_key signed by the CA the engine trusts"
    else:
        fix = "start it, or remove it from the engines file"
    return f"The Docker engine {engine.name!r} at {engine.url}{_listed_in()} is not answering: {fix}."


def _listed_in() -> str:
    """Where a named engine is listed, for a sentence about it."""
    path = settings.sandbox_hosts_file()
    return f" (in {path})" if path else ""


class _SSHAdapter(SSHHTTPAdapter):
    """Docker's paramiko adapter, given the engine's own key and known-hosts file (Docker's reads ~/.ssh alone) and a
    bounded login."""

    def __init__(self, base_url: str, login: SshLogin, timeout: int):
        self._login = login
        self._login_timeout = min(timeout, _SSH_CONNECT_TIMEOUT_SEC)
        super().__init__(base_url, timeout=timeout)

    def _create_paramiko_client(self, base_url: str) -> None:
        super()._create_paramiko_client(base_url)
        if self._login.known_hosts is not None:
            self.ssh_client.load_host_keys(str(self._login.known_hosts))
        if self._login.key is not None:
            self.ssh_params.update(key_filename=str(self._login.key), look_for_keys=False, allow_agent=False)
        self.ssh_params.update(timeout=self._login_timeout, banner_timeout=self._login_timeout,
                               auth_timeout=self._login_timeout)

    def get_connection(self, url, proxies=None):
        # Docker's adapter keeps a pool per request URL, and so opens an ssh session for nearly every call (each
        # container and exec has URLs of its own) while the pools it drops still hold theirs: past sshd's
        # MaxSessions (10) the host refuses the next. One pool for the engine reuses its sessions.
        return super().get_connection("http+docker://ssh", proxies)


def _ssh_client(engine: Engine, version: str | None, timeout: int) -> docker.DockerClient:
    """A client whose every call goes through the engine's ssh login. Docker's SDK makes its ssh adapter only
    from a bare URL, so the client is made without one (asking nothing) and given ours, mounted as Docker
    mounts its own."""
    assert engine.ssh is not None and urlsplit(engine.url).scheme == "ssh"
    made = docker.DockerClient(base_url="unix:///nonexistent", version=version or _PLACEHOLDER_VERSION,
                               timeout=timeout)
    api = made.api
    adapter = _SSHAdapter(engine.url, engine.ssh, timeout)
    api.adapters.pop("http+docker://", None)  # the placeholder's socket: no call may fall through to it
    api._custom_adapter = adapter
    api.mount("http+docker://ssh", adapter)
    api.base_url = "http+docker://ssh"
    return made
