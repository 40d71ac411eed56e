"""One unary gRPC call spoken on HTTP/2 with the standard library alone (RFC 9113, RFC 7541).

The health probe runs in a fresh interpreter every few seconds in every container; this module
lets it make its one call without importing grpcio. It sends the connection preface, an empty
SETTINGS frame, one HEADERS frame (HPACK literals, no Huffman coding and no dynamic table) and one
DATA frame that ends the stream; then it reads frames, acknowledging the server's SETTINGS and
PINGs, until the stream ends, and returns the reply message's bytes.

It reads no response header: a reply message arrives only from a call that succeeded (a server
that fails a unary call sends trailers alone), so a call that ends without one, or that the server
resets or the connection goes away from, is a `WireError`. With a credentials directory the call
runs over mutual TLS (ALPN h2), the server's certificate checked against the internal plane's
name, as `InternalTLS` channels check it.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from pathlib import Path

from agentserve.common.internal_identity import CA_FILE, CERT_FILE, INTERNAL_NAME, KEY_FILE

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
STREAM = 1  # the call's stream: the first a client opens
FRAME_HEADER = struct.Struct(">I B I")  # length (24 bits, read with the type), type, flags, stream
MAX_REPLY_BYTES = 1 << 16


class WireError(Exception):
    """The call did not return a reply message (refused, reset, ended early, or malformed)."""


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    """HPACK's integer representation (RFC 7541 5.1) with `first`'s high bits set."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out, value = [first | limit], value - limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _string(text: str) -> bytes:
    raw = text.encode()
    return _integer(len(raw), 7, 0) + raw


def _literal(name_index: int, value: str) -> bytes:
    """A header from the static table's name at `name_index`, not added to any table."""
    return _integer(name_index, 4, 0) + _string(value)


def request_headers(path: str, authority: str, scheme: str) -> bytes:
    """The call's header block: :method POST, :scheme, :path, :authority, content-type, te."""
    scheme_index = {"http": 0x86, "https": 0x87}[scheme]  # indexed fields 6 and 7
    return b"".join(
        [
            b"\x83",  # :method POST (indexed field 3)
            bytes([scheme_index]),
            _literal(4, path),  # :path
            _literal(1, authority),  # :authority
            _literal(31, "application/grpc"),  # content-type
            b"\x00" + _string("te") + _string("trailers"),  # a name outside the static table
        ]
    )


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return FRAME_HEADER.pack(len(payload) << 8 | kind, flags, stream) + payload


def _tls_context(tls_dir: str) -> ssl.SSLContext:
    root = Path(tls_dir)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=root / CA_FILE)
    context.load_cert_chain(root / CERT_FILE, root / KEY_FILE)
    context.set_alpn_protocols(["h2"])
    return context


class _Reader:
    """Frames from a socket, each read within the call's deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline, self.buffer = sock, deadline, b""

    def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise WireError("deadline exceeded")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise WireError("connection closed before the call ended")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def next(self) -> tuple[int, int, int, bytes]:
        length_kind, flags, stream = FRAME_HEADER.unpack(self._exactly(FRAME_HEADER.size))
        payload = self._exactly(length_kind >> 8)
        return length_kind & 0xFF, flags, stream & 0x7FFFFFFF, payload


def _reply_message(body: bytes) -> bytes:
    """The one length-prefixed gRPC message of a unary reply (uncompressed)."""
    if len(body) < 5 or body[0] != 0:
        raise WireError("no uncompressed reply message")
    (length,) = struct.unpack(">I", body[1:5])
    if len(body) != 5 + length:
        raise WireError("reply message length does not match its frames")
    return body[5:]


def unary_call(target: str, path: str, message: bytes, timeout_s: float, tls_dir: str = "") -> bytes:
    """Call `path` (``/package.Service/Method``) at `target` (host:port) with the serialized request
    `message`; return the serialized reply. Raises WireError or OSError when there is none within
    `timeout_s`."""
    host, _, port = target.rpartition(":")
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as raw:
        sock: socket.socket = raw
        if tls_dir:
            sock = _tls_context(tls_dir).wrap_socket(raw, server_hostname=INTERNAL_NAME)
            if sock.selected_alpn_protocol() != "h2":
                raise WireError("the server did not agree to HTTP/2")
        authority = INTERNAL_NAME if tls_dir else target
        headers = request_headers(path, authority, "https" if tls_dir else "http")
        body = b"\x00" + struct.pack(">I", len(message)) + message
        sock.sendall(
            PREFACE
            + frame(SETTINGS, 0, 0)
            + frame(HEADERS, END_HEADERS, STREAM, headers)
            + frame(DATA, END_STREAM, STREAM, body)
        )
        return _read_reply(_Reader(sock, deadline), sock)


def _read_reply(reader: _Reader, sock: socket.socket) -> bytes:
    body = b""
    while True:
        kind, flags, stream, payload = reader.next()
        if kind == SETTINGS and not flags & ACK:
            sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            sock.sendall(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY or (kind == RST_STREAM and stream == STREAM):
            raise WireError("the server ended the call")
        elif stream == STREAM and kind in (DATA, HEADERS):
            if kind == DATA:
                if flags & PADDED:
                    payload = payload[1 : len(payload) - payload[0]]
                body += payload
                if len(body) > MAX_REPLY_BYTES:
                    raise WireError("reply larger than a probe expects")
            if flags & END_STREAM:
                return _reply_message(body)
