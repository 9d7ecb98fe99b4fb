"""TLS material for a Docker engine that listens on TCP with mutual TLS, made with openssl.

The steps of Docker's "protect the daemon socket" guide: a CA of its own, a server certificate for 127.0.0.1
(subjectAltName IP:127.0.0.1, extendedKeyUsage serverAuth) and a client certificate (clientAuth), both signed by
that CA. Keys are P-256 (fast to make, accepted by Docker's Go TLS and Python's ssl) and mode 600. A second call
in another folder makes a CA the first knows nothing of: a client certificate from it must be refused.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"  # test material: nothing should trust it for long


@dataclass(frozen=True)
class TlsFiles:
    """Where each file is: the CA (its certificate is what both sides verify against), the server's pair and the
    client's pair."""

    folder: Path
    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def openssl() -> str | None:
    return shutil.which("openssl")


def make(folder: Path, host_ip: str = "127.0.0.1") -> TlsFiles:
    """A CA, a server certificate for ``host_ip`` and a client certificate in ``folder`` (made if missing)."""
    tool = openssl()
    if tool is None:
        raise RuntimeError("openssl is not installed: install Debian's openssl package.")
    folder.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(folder, folder / "ca.pem", folder / "ca-key.pem", folder / "server.pem",
                     folder / "server-key.pem", folder / "client.pem", folder / "client-key.pem")

    def run(*args: str) -> None:
        subprocess.run([tool, *args], check=True, capture_output=True, timeout=60)

    new_key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    run("req", "-x509", *new_key, "-keyout", str(files.ca_key), "-out", str(files.ca), "-days", DAYS,
        "-subj", "/CN=amber-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for cert, key, name, extensions in (
            (files.server_cert, files.server_key, host_ip,
             f"subjectAltName=IP:{host_ip}\nextendedKeyUsage=serverAuth\n"),
            (files.client_cert, files.client_key, "amber-client", "extendedKeyUsage=clientAuth\n")):
        request, extfile = cert.with_suffix(".csr"), cert.with_suffix(".ext")
        extfile.write_text(extensions)
        run("req", *new_key, "-keyout", str(key), "-out", str(request), "-subj", f"/CN={name}")
        run("x509", "-req", "-in", str(request), "-CA", str(files.ca), "-CAkey", str(files.ca_key),
            "-CAcreateserial", "-days", DAYS, "-out", str(cert), "-extfile", str(extfile))
        request.unlink()
        extfile.unlink()
    for key in (files.ca_key, files.server_key, files.client_key):
        key.chmod(0o600)
    return files
