"""TLS for tests and `make attack --tls`: a throw-away certificate for the daemon's HTTPS listener, the
client context that trusts it, the first bytes of a TLS handshake for clients that stop there, and
whether the server closed a connection."""
from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path


def self_signed(directory: Path, name: str = "tls", common_name: str = "localhost") -> tuple[Path, Path]:
    """(certificate, key): a self-signed P-256 certificate for localhost and 127.0.0.1 (openssl binary),
    as `<name>.crt` and `<name>.key` in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={common_name}",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def client_context(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def client_hello(ctx: ssl.SSLContext) -> bytes:
    """The ClientHello `ctx` sends first (a client that sends part of it and stops stalls the handshake)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def is_closed_by_server(s: socket.socket, within: float) -> bool:
    """Whether the server closes `s` within `within` seconds (a pause of that length when it does not)."""
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
