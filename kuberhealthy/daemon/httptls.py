"""The HTTPS listener's part of the HTTP worker: the certificate and its context, a client connection
that does its TLS handshake in the worker's selector, and answers written under the write deadline.

The worker (httpworker.py) treats a TLS connection as any other: the same caps, deadlines, lingering
close and pool. What differs is here. The handshake is stepped without blocking in the main loop
(SSLWantRead/SSLWantWrite say which readiness to wait for), and it counts against the head's
deadline, so a client that opens TCP and never finishes its handshake is closed like one that never
finishes its headers. A client that speaks plain HTTP to this port gets a one-line 400, as Go's
server answers it. The socket stays non-blocking for its whole life (an SSLSocket cannot be read
with MSG_DONTWAIT): the pool thread writes the answer in Python's timeout mode, each sendall() given
up after WRITE_TIMEOUT in all (TLSAnswerSocket).

ServerTLS loads the certificate and key (TLS 1.2 at least, HTTP/1.1 by ALPN) at start-up, where a
file that cannot be used stops the daemon with a message naming its config key and environment
variable; in the worker it notices when either file changes (a Secret's update swaps them) and
loads the new pair for new connections, keeping the old one while the new one does not load.

What this module does not do: choose where to listen (server.py), buffer requests, enforce
deadlines or caps (httpconn.py, httpworker.py).
"""
from __future__ import annotations

import logging
import os
import selectors
import socket
import ssl
import time
from typing import Any

from kuberhealthy.base.config import ENV_KEYS
from kuberhealthy.base.errors import ConfigError
from kuberhealthy.daemon.httpconn import WRITE_TIMEOUT, Conn, State

logger = logging.getLogger(__name__)

_ENV_OF = {key: env for env, key in ENV_KEYS.items()}
CERT_KEY = f"tlsCertFile ({_ENV_OF['tlsCertFile']})"  # how a message names each file's setting
KEY_KEY = f"tlsKeyFile ({_ENV_OF['tlsKeyFile']})"
RELOAD_CHECK = 10.0  # seconds between looks at the certificate and key files
_WRITE_CHUNK = 64 * 1024  # bytes per TLS write: each has the time left of the answer's deadline
_PLAIN_HTTP_ANSWER = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
                      b"Client sent an HTTP request to an HTTPS server.\n")


def _readable_file(path: str, key: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise ConfigError(key, f"cannot read {path!r}: {e.strerror or e}") from None


def load_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context for this certificate (chain) and key, or ConfigError naming the file at fault."""
    _readable_file(cert_file, CERT_KEY)
    _readable_file(key_file, KEY_KEY)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_RENEGOTIATION  # a renegotiation would need writes while the poller reads
    ctx.set_alpn_protocols(["http/1.1"])
    ctx.sslsocket_class = TLSAnswerSocket
    try:
        # the certificates alone first, to tell which file is at fault
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert_file)
    except (ssl.SSLError, ValueError) as e:
        raise ConfigError(CERT_KEY, f"{cert_file!r} holds no PEM certificate: {e}") from None
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, ValueError) as e:
        raise ConfigError(KEY_KEY, f"{key_file!r} holds no unencrypted PEM private key of the certificate in "
                                   f"{cert_file!r}: {e}") from None
    return ctx


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)  # follows the symlinks a Secret volume swaps on update
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class ServerTLS:
    """The HTTPS listener's port and its current context; reloaded when the files change."""

    def __init__(self, cert_file: str, key_file: str, port: int, check_every: float = RELOAD_CHECK) -> None:
        self.cert_file, self.key_file, self.port = cert_file, key_file, port
        self._check_every = check_every
        self._seen = self._files()
        self.context = load_context(cert_file, key_file)
        self._next_check = time.monotonic() + check_every

    def _files(self) -> tuple[tuple[int, int, int] | None, ...]:
        return _signature(self.cert_file), _signature(self.key_file)

    def refresh(self, now: float) -> bool:
        """At most every `check_every` seconds: when either file changed since it was last loaded (or
        tried), load the pair; a pair that does not load is logged and the current one kept.
        True when a new context was loaded."""
        if now < self._next_check:
            return False
        self._next_check = now + self._check_every
        seen = self._files()
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            self.context = load_context(self.cert_file, self.key_file)
        except ConfigError as e:
            logger.warning("Keeping the current TLS certificate: the changed files do not load: %s", e)
            return False
        logger.info("Serving HTTPS with the new certificate from %s", self.cert_file)
        return True

    def wrap(self, sock: socket.socket) -> TLSAnswerSocket:
        """An accepted socket as a non-blocking server-side TLSAnswerSocket whose handshake is still to
        do; `sock` is detached (and closed if this fails)."""
        try:
            wrapped = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except OSError:
            sock.close()
            raise
        assert isinstance(wrapped, TLSAnswerSocket)
        wrapped.settimeout(0.0)
        return wrapped


class TLSAnswerSocket(ssl.SSLSocket):
    """A server-side TLS socket whose sendall() (and sendfile()), in the pool thread, gives up after
    `write_timeout` in all, raising TimeoutError, and leaves the socket non-blocking again for the
    poller. Made by ServerTLS's context (its sslsocket_class)."""

    write_timeout: float = WRITE_TIMEOUT

    def sendall(self, data: Any, flags: int = 0) -> None:
        deadline = time.monotonic() + self.write_timeout
        try:
            with memoryview(data) as view, view.cast("B") as octets:
                sent = 0
                while sent < len(octets):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"answer not written within {self.write_timeout:.0f} s")
                    self.settimeout(left)
                    sent += self.send(octets[sent:sent + _WRITE_CHUNK], flags)
        finally:
            self.settimeout(0.0)

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        """Through sendall, so under its deadline (the files served are the dashboard's small assets)."""
        file.seek(offset)
        data = file.read(count) if count else file.read()
        self.sendall(data)
        return len(data)


def _raw_recv(sock: socket.socket, size: int, flags: int = 0) -> bytes:
    """The TCP bytes themselves, past the TLS layer (a socket the poller keeps non-blocking)."""
    return socket.socket.recv(sock, size, flags | socket.MSG_DONTWAIT)


class TLSConn(Conn):
    """A connection on the HTTPS listener: in HANDSHAKE until its handshake is done (under the head's
    deadline), then as Conn, reading decrypted bytes. `events` says which readiness the poller must
    wait for next (TLS may need to write to go on reading); `refused` says why a client that broke
    the protocol is closed."""

    tls = True

    def __init__(self, sock: TLSAnswerSocket, client: Any, server: Any, now: float) -> None:
        super().__init__(sock, client, server, now)
        self.sock: TLSAnswerSocket = sock
        self.state = State.HANDSHAKE
        self._peeked = False

    def recv(self, size: int = 65536) -> bytes | None:
        """Non-blocking: the decrypted bytes (the handshake stepped first while it is under way), b""
        when the client closed or broke TLS (then `refused` may say why), None when nothing is there."""
        if self.state is State.LINGER:  # half-closed: drained as TCP bytes, never decrypted
            try:
                return _raw_recv(self.sock, size)
            except (BlockingIOError, InterruptedError):
                return None
            except OSError:
                return b""
        try:
            if self.state is State.HANDSHAKE:
                if not self._peeked and self._plain_http():
                    return b""
                self.sock.do_handshake()
                self.state = State.HEAD
            return self._read(size)
        except ssl.SSLWantReadError:
            self.events = selectors.EVENT_READ
            return None
        except ssl.SSLWantWriteError:
            self.events = selectors.EVENT_WRITE
            return None
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError):
            return b""  # closed or reset, not a protocol error
        except ssl.SSLError as e:
            self.refused = f"TLS: {e.reason or e}"
            return b""
        except OSError:
            return b""

    def _read(self, size: int) -> bytes:
        """What the TLS layer has: one record from the socket and whatever it already decrypted (the
        poller hears of bytes in the socket, never of bytes held inside the TLS layer)."""
        data = self.sock.recv(size)
        self.events = selectors.EVENT_READ
        if not data or not self.sock.pending():
            return data
        more = [data]
        while self.sock.pending():
            more.append(self.sock.recv(size))
        return b"".join(more)

    def _plain_http(self) -> bool:
        """Whether the client's first byte says plain HTTP rather than TLS: if so it is answered 400
        in plain text (best effort, never waiting) and True is returned."""
        try:
            first = _raw_recv(self.sock, 1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            raise ssl.SSLWantReadError() from None
        self._peeked = True
        if not first.isalpha():  # a TLS record starts with 0x16, a request line with its method
            return False
        try:
            socket.socket.send(self.sock, _PLAIN_HTTP_ANSWER, socket.MSG_DONTWAIT)
        except OSError:
            pass
        self.refused = "plain HTTP on the HTTPS port"
        return True

    def send_nowait(self, data: bytes) -> bool:
        try:
            self.sock.send(data)  # non-blocking; a fresh connection's send buffer takes it whole
            return True
        except OSError:
            return False

    def resume(self) -> None:
        try:
            self.sock.settimeout(0.0)  # gunicorn's error page may have left it blocking
        except OSError:
            pass  # closed in the thread: the poller drops it

    def half_close(self) -> bool:
        """close_notify if it can go at once, then FIN; what the client sends after is drained raw."""
        self.resume()
        if self.state is not State.HANDSHAKE:
            try:
                self.sock.unwrap()  # sends close_notify; waiting for the client's is not worth it
            except (OSError, ValueError):
                pass
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_WR)
            return True
        except OSError:
            return False
