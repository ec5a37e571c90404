"""One client connection as the HTTP worker's poller sees it: the bytes received so far, whether they
hold a whole request yet, and the deadline the client must meet.

The poller (httpworker.py) reads without blocking (MSG_DONTWAIT on a socket that stays blocking) and
feeds the bytes here. Once the request line, the headers and the whole body are in, a pool thread
answers it, reading the request with gunicorn's own parser over the buffer (BufferUnreader: past the
buffer is end of input, the socket is never read in a thread), so no client can hold a thread by
sending slowly. A head that names no Content-Length or Transfer-Encoding (any case, `_` for `-` too)
frames no body (RFC 9112 section 6.3; gunicorn reads such a request's body as empty): the request is
whole at the end of its head, and the pool thread parses it, as stock gthread does, keeping the
poller's turn short. Any other head is parsed here to learn where its body ends, with that same
parser: framing is gunicorn's, never a second opinion that could desync. That parse is the request's
only one: the pool thread takes the parsed request (request()), the body bytes received after the
head handed to the same parser; only a head gunicorn refused is parsed again, in the thread, for
gunicorn's error page.

Bodies are buffered up to the report limit (MAX_BODY), chunked ones too (their chunks are scanned,
not decoded). A body past the limit is handed on as soon as that is known, with what is in, and the
connection closes after the answer: the app answers 413 from Content-Length, or from reading more
than MAX_BODY bytes of a chunked body. A head gunicorn refuses (bad line, bare LF, too long) is
handed on at once for its error page.

The answer is written by the pool thread on the blocking socket (AnswerSocket): one send() that the
kernel completes, as stock gthread does, rather than Python's timeout mode, which polls before
every send and so trades the GIL back and forth per socket-buffer-full of a large answer. The
deadline stays: the kernel's SO_SNDTIMEO bounds each send, and each sendall() as a whole is given
up after WRITE_TIMEOUT (a client that does not read, or reads a trickle).

A connection on the HTTPS listener is a TLSConn (httptls.py), which reads through TLS; this module's
buffering and parsing see only the decrypted bytes.

What this module does not do: the selector, deadlines' enforcement and the connection caps
(httpworker.py), answering requests (gunicorn and the app), TLS (httptls.py).
"""
from __future__ import annotations

import enum
import io
import os
import re
import selectors
import socket
import struct
import time
from typing import Any

from gunicorn import http
from gunicorn.http.unreader import Unreader

from kuberhealthy.web.report.body import MAX_BODY

HEAD_DEADLINE = 5.0  # seconds from accept (or a kept-alive request's first byte) to the end of the headers
BODY_DEADLINE = 10.0  # seconds from the end of the headers to the end of the body
MAX_HEAD = 64 * 1024  # bytes of request line and headers buffered; past it gunicorn judges what is in
MAX_CHUNKED_RAW = 2 * MAX_BODY + MAX_HEAD  # raw bytes of a chunked body (framing included) buffered at most
_CHUNK_LINE_MAX = 8192  # gunicorn refuses a longer chunk-size line (limit_request_field_size)
_HEX = re.compile(rb"[0-9a-fA-F]+")
_HEAD_END = re.compile(rb"\r\n\r\n|(?<!\r)\n")  # the end of the head, or a bare LF (gunicorn: 400 at once)
_BODY_HEADER = re.compile(rb"content[-_]length|transfer[-_]encoding", re.IGNORECASE)  # anywhere in the head
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
WRITE_TIMEOUT = 10.0  # seconds one write of an answer may take (a client that does not read)
_MIN_SNDTIMEO = 0.001  # SO_SNDTIMEO of zero means "no timeout": never set less than this


class State(enum.Enum):
    HANDSHAKE = "handshake"  # TLS: the handshake under way, under the head's deadline
    HEAD = "head"  # waiting for the request line and headers
    BODY = "body"  # headers in, waiting for the rest of the body
    BUSY = "busy"  # in a pool thread: the poller leaves it alone
    IDLE = "idle"  # kept alive between requests
    LINGER = "linger"  # answered and half-closed: draining what the client still sends, then closed


class AnswerSocket(socket.socket):
    """A client socket whose sendall() (and sendfile()), on the blocking socket the pool thread
    writes the answer on, lets the kernel block in one send() and still gives up after WRITE_TIMEOUT
    in all, raising TimeoutError. Non-blocking or with a Python timeout it is a plain socket."""

    __slots__ = ("_sndtimeo", "write_timeout")
    write_timeout: float  # seconds a sendall() may take in all
    _sndtimeo: float  # SO_SNDTIMEO as last set

    @classmethod
    def adopt(cls, sock: socket.socket, write_timeout: float = WRITE_TIMEOUT) -> AnswerSocket:
        """`sock` (just accepted) as an AnswerSocket, blocking; `sock` itself is detached (and its
        descriptor closed if this fails)."""
        family, kind, proto, fd = sock.family, sock.type, sock.proto, sock.detach()
        try:
            new = cls(family, kind, proto, fileno=fd)
        except OSError:
            os.close(fd)
            raise
        try:
            new.setblocking(True)
            new.write_timeout = write_timeout
            new._sndtimeo = 0.0
            new._set_sndtimeo(write_timeout)
        except OSError:
            new.close()
            raise
        return new

    def _set_sndtimeo(self, seconds: float) -> None:
        seconds = max(seconds, _MIN_SNDTIMEO)
        whole = int(seconds)
        self.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                        struct.pack("ll", whole, int((seconds - whole) * 1_000_000)))
        self._sndtimeo = seconds

    def sendall(self, data: Any, flags: int = 0) -> None:
        if self.gettimeout() is not None:  # non-blocking (gunicorn's error page) or a Python timeout
            return super().sendall(data, flags)
        if self._sndtimeo != self.write_timeout:  # lowered by a slow write before
            self._set_sndtimeo(self.write_timeout)
        with memoryview(data) as view, view.cast("B") as octets:
            deadline = time.monotonic() + self.write_timeout
            sent = 0
            while sent < len(octets):
                try:
                    sent += self.send(octets[sent:], flags)  # blocks in the kernel, SO_SNDTIMEO at most
                except BlockingIOError:
                    pass  # SO_SNDTIMEO passed with nothing sent
                if sent < len(octets):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"answer not written within {self.write_timeout:.0f} s")
                    self._set_sndtimeo(left)
        return None

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        """Through sendall, so under its deadline (os.sendfile on a blocking socket would wait for the
        client without one). The files served are the dashboard's small assets."""
        file.seek(offset)
        data = file.read(count) if count else file.read()
        self.sendall(data)
        return len(data)


class BufferUnreader(Unreader):  # type: ignore[misc]  # gunicorn ships no types
    """gunicorn's unreader over bytes already received: it never reads a socket, past them is EOF."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.buf.write(data)

    def feed(self, data: bytes) -> None:
        """More input, after what it holds (the body bytes received since the head was parsed)."""
        self.buf.seek(0, os.SEEK_END)
        self.buf.write(data)

    def chunk(self, size_hint: int | None = None) -> bytes:
        return b""


def buffer_parser(cfg: Any, data: bytes, client: Any) -> Any:
    """gunicorn's HTTP/1 request parser reading `data` only."""
    parser = http.get_parser(cfg, [], client)
    parser.unreader = BufferUnreader(data)
    return parser


class Conn:
    """A client connection: the socket, its peer, its state and deadline, the bytes of the request
    being received (and anything pipelined behind it). Touched only by the poller's thread, except
    while BUSY, when only the pool thread handling it touches it."""

    tls = False  # on the HTTPS listener (httptls.TLSConn)

    def __init__(self, sock: socket.socket, client: Any, server: Any, now: float) -> None:
        self.sock = sock
        self.events = selectors.EVENT_READ  # the readiness the poller is to wait for (TLS may need to write)
        self.watched = 0  # the readiness the poller waits for
        self.refused: str | None = None  # why the client is closed after breaking the protocol (TLS)
        self.client = client  # the peer's address: REMOTE_ADDR, and the key of the per-source cap
        self.server = server
        self.source = str(client[0]) if isinstance(client, tuple) and client else str(client)
        self.state = State.HEAD
        self.deadline = now + HEAD_DEADLINE
        self.data = bytearray()
        self.must_close = False  # the body was handed on incomplete: answer, then close
        self.continued = False  # "100 Continue" was sent here, so gunicorn must not send it again
        self.drop: str | None = None  # why the request is closed unanswered (framing not worth buffering)
        self.parser: Any = None  # the request's parser: from the head's parse in the poller, or the thread's
        self._request: Any = None  # the request that parse produced, until the pool thread takes it
        self._parsed = 0  # bytes of `data` the parser was given (what was buffered when the head was parsed)
        self.drained = 0  # bytes thrown away while lingering
        self._scan = 0  # where the search for the end of the head resumes
        self._head_len = 0  # bytes of request line and headers, once parsed
        self._length: int | None = None  # Content-Length, once parsed (None: chunked)
        self._chunk_pos = 0  # chunked: where the next chunk-size line starts
        self._chunk_body = 0  # chunked: body bytes seen so far

    def start_request(self, now: float) -> None:
        """A new request begins (accept, or leftover/first bytes on a kept-alive connection)."""
        self.state = State.HEAD
        self.deadline = now + HEAD_DEADLINE
        self.must_close = self.continued = False
        self.drop = None
        self.parser = self._request = None
        self._scan = self._head_len = self._parsed = 0
        self._length = None

    def ready(self, cfg: Any, now: float) -> bool:
        """Whether what is buffered is a whole request (or one to hand on as it is, for gunicorn to refuse
        or the app to answer 413). Sends "100 Continue" when the client waits for it."""
        if self.state is State.HEAD:
            if not self._head_done(cfg, now):
                return False
            if not self.awaiting_body():
                return True
        if self._length is not None:
            return len(self.data) >= self._head_len + self._length
        return self._chunks_done()

    def awaiting_body(self) -> bool:
        return self.state is State.BODY

    def _head_done(self, cfg: Any, now: float) -> bool:
        """Whether the head is in; parses it then if it may frame a body. Leaves the state BODY when a
        body is still to come."""
        found = _HEAD_END.search(self.data, max(0, self._scan - 3))
        if found is None and len(self.data) <= MAX_HEAD:
            self._scan = len(self.data)
            return False
        if found is not None and _BODY_HEADER.search(self.data, 0, found.end()) is None:
            return True  # no body: the pool thread parses the head (or refuses it)
        parser = buffer_parser(cfg, bytes(self.data), self.client)
        try:
            req = next(parser)
        except Exception:  # noqa: BLE001 - gunicorn refuses the head: the pool thread parses it again for its error page
            return True
        if req is None:
            return True
        self.parser, self._request, self._parsed = parser, req, len(self.data)
        self._head_len = len(self.data) - len(parser.unreader.buf.getvalue())
        reader = req.body.reader
        length = getattr(reader, "length", None)
        if isinstance(length, int):
            if length > MAX_BODY:
                self.must_close = True  # the app answers 413 from Content-Length alone
                return True
            self._length = length
            if len(self.data) - self._head_len >= length:
                return True
        else:  # chunked (gunicorn refuses every other framing of a request)
            self._chunk_pos = self._head_len
            self._chunk_body = 0
        self.state = State.BODY
        self.deadline = now + BODY_DEADLINE
        if req._expected_100_continue:
            self._send_continue()
        return True

    def _send_continue(self) -> None:
        # if it cannot go, the client sends its body anyway after a while (curl: 1 s), or it is gone
        self.continued = self.send_nowait(_CONTINUE)

    def send_nowait(self, data: bytes) -> bool:
        """Send `data` without waiting (a fresh socket's send buffer takes a short answer whole)."""
        try:
            self.sock.send(data, socket.MSG_DONTWAIT)
            return True
        except OSError:
            return False

    def _chunks_done(self) -> bool:
        """Scan the chunked body's framing (not its contents) as far as it is in; True once the last
        chunk and the trailers are in, the body is past MAX_BODY, or the framing is broken (gunicorn
        refuses it). Framing too wasteful to keep buffering sets `drop`."""
        data = self.data
        if len(data) - self._head_len > MAX_CHUNKED_RAW:
            self.drop = "chunk framing too large"
            return True
        while True:
            eol = data.find(b"\r\n", self._chunk_pos, self._chunk_pos + _CHUNK_LINE_MAX)
            if eol < 0:
                if len(data) - self._chunk_pos >= _CHUNK_LINE_MAX:
                    self.drop = "chunk-size line too long"
                    return True
                return False
            size_text, *ext = bytes(data[self._chunk_pos:eol]).split(b";", 1)
            if ext:
                size_text = size_text.rstrip(b" \t")
            if not _HEX.fullmatch(size_text):
                return True  # gunicorn refuses it as it reads the body
            size = int(size_text, 16)
            if size == 0:  # the last chunk: the trailers end at an empty line
                return data.find(b"\r\n\r\n", eol) >= 0
            if self._chunk_body + min(size, len(data) - eol - 2) > MAX_BODY:
                self.must_close = True  # the app reads MAX_BODY + 1 bytes of it and answers 413
                return True
            end = eol + 2 + size + 2
            if len(data) < end:
                return False
            self._chunk_body += size
            self._chunk_pos = end

    def request(self, cfg: Any) -> Any:
        """In the pool thread, once ready: the request, parsed (its body, and anything pipelined behind
        it, in `parser`). The poller's parse of the head is taken as it is, with the bytes received
        since; a head it could not parse is parsed again here, raising gunicorn's error."""
        req, self._request = self._request, None
        if req is None:
            self.parser = buffer_parser(cfg, self.take(), self.client)
            return next(self.parser)
        rest, self.data = self.data[self._parsed:], bytearray()
        if rest:
            self.parser.unreader.feed(bytes(rest))
        return req

    def take(self) -> bytes:
        """All the bytes buffered (the request and anything pipelined behind it); the head's parse, if
        any, is dropped with them."""
        data, self.data = bytes(self.data), bytearray()
        self.parser = self._request = None
        return data

    def give_back(self, leftover: bytes) -> None:
        """After an answer: the bytes the parser did not consume (the next pipelined request)."""
        self.data = bytearray(leftover)

    def recv(self, size: int = 65536) -> bytes | None:
        """Non-blocking read: the bytes, b"" when the client closed, None when nothing is there."""
        try:
            return self.sock.recv(size, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return b""

    def resume(self) -> None:
        """Back from a pool thread, before the poller reads it again (the plain socket stays blocking)."""

    def half_close(self) -> bool:
        """Send FIN (RFC 9112 section 9.6) before lingering; False when the socket is already gone."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
            return True
        except OSError:
            return False

    def fileno(self) -> int:
        try:
            return self.sock.fileno()
        except OSError:
            return -1

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def unread_bytes(parser: Any) -> bytes:
    """What the parser's BufferUnreader still holds after an answer."""
    unreader = parser.unreader
    unreader.buf.seek(0, os.SEEK_END)
    data: bytes = unreader.buf.getvalue()
    unreader.buf = io.BytesIO()
    return data
