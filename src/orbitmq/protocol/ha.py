"""The HA (replication) stream between a master and its slaves: RocketMQ 4.x's framing, sans-I/O.

Two one-way streams share one TCP connection to the master's HA port:

- slave -> master: reports, 8 bytes each, a big-endian signed offset: how far the slave's commit
  log reaches (its first report says where the master should stream from);
- master -> slave: transfer frames, ``[offset: i64][size: i32][size bytes]``: commit log bytes
  from ``offset`` on, exactly as the master stores them. A size-0 frame is a heartbeat that says
  where the master streams from next.

OrbitMQ's master sends only whole stored entries in a frame, never more than one segment's
worth, and sends a segment's blank end entry as its 8-byte header alone (the rest of a segment
after it holds nothing): a frame at ``offset`` holding a blank entry of TOTALSIZE ``n`` moves the
stream to ``offset + n``, the next segment. See broker/replication/ for the rest of the rules
(what a plausible report is, how a slave checks what it is sent).

Controller mode (docs/failover.md) adds one exchange at the start of a connection, so that a
master knows which member each connection is and both sides know each other's epoch: the slave
first sends a *hello*, two 8-byte values, :data:`HELLO_MARK` (negative: never an offset) and
``epoch << 32 | member``; the master answers with an *epoch frame*, a transfer header at offset
:data:`HELLO_MARK` of size 8 whose body is its own ``epoch << 32 | member``. A SYNC_MASTER then
sends *confirm frames*, transfer headers at offset :data:`CONFIRM_MARK` of size 8 whose body is
its confirm offset (what every in-sync member holds), at once and whenever it rises: a slave
serves consumers only below it. Without controller mode none of these is sent and the stream is
RocketMQ 4.x's.

Authentication (the master's ``authentication_enabled``, docs/replication.md "Who may
replicate") comes before all of the above: four *auth frames*, each a transfer header at offset
:data:`AUTH_MARK` and a body of at most :data:`AUTH_BODY_MAX` bytes that starts with the version
(:data:`AUTH_VERSION`, one byte):

- slave -> master, at once on connect, the *request*: ``[version]`` (the version it speaks);
- master -> slave, the *challenge*: ``[version][nonce: 32]``, only once a request of a version
  it speaks came first (a client that does not authenticate gets not one byte);
- slave -> master, the *proof*: ``[version][key length: 1][access key][mac: 20][nonce: 32]``,
  the mac an HMAC-SHA1 under the key's secret of the master's nonce, the slave's nonce and
  :data:`AUTH_SLAVE_CONTEXT`;
- master -> slave, once the proof holds, the *acceptance*: ``[version][key length][access
  key][mac: 20]``, the mac under the master's own key of the slave's nonce, the master's nonce
  and :data:`AUTH_MASTER_CONTEXT` (the slave checks its master too).

Nothing else is sent by either side before the acceptance: then the slave's hello (controller
mode) and reports follow, as above. The contexts name the direction, so a proof cannot be
replayed as an acceptance; the nonces are fresh per connection, so neither can be replayed
later. A refused proof closes the connection without an answer.

Both readers take bytes in and give values out, and buffer at most one report or one frame:
their memory is bounded by ``frame_size_max``. A frame header with a negative offset or a size
outside ``0..frame_size_max`` raises :class:`~orbitmq.errors.RemoteProtocolError`.
"""

from __future__ import annotations

import dataclasses
import struct

from orbitmq.errors import RemoteProtocolError

__all__ = [
    "REPORT_SIZE",
    "TRANSFER_HEADER_SIZE",
    "encode_report",
    "encode_transfer_header",
    "ReportReader",
    "TransferFrame",
    "TransferReader",
    "HELLO_MARK",
    "encode_hello",
    "encode_epoch_frame",
    "unpack_identity",
    "CONFIRM_MARK",
    "encode_confirm_frame",
    "AUTH_MARK",
    "AUTH_VERSION",
    "AUTH_NONCE_SIZE",
    "AUTH_MAC_SIZE",
    "AUTH_KEY_BYTES_MAX",
    "AUTH_BODY_MAX",
    "AUTH_FRAME_MAX",
    "AUTH_SLAVE_CONTEXT",
    "AUTH_MASTER_CONTEXT",
    "AuthProof",
    "encode_auth_request",
    "parse_auth_request",
    "encode_auth_challenge",
    "parse_auth_challenge",
    "encode_auth_proof",
    "parse_auth_proof",
    "encode_auth_accept",
    "parse_auth_accept",
    "auth_frame_body",
]

REPORT_SIZE = 8
TRANSFER_HEADER_SIZE = 8 + 4
_REPORT = struct.Struct(">q")
_HEADER = struct.Struct(">qi")
OFFSET_MAX = 2**63 - 1
HELLO_MARK = -0x4F524249544D51  # "ORBITMQ": a hello's first value, an epoch frame's offset
CONFIRM_MARK = HELLO_MARK - 1  # a confirm frame's offset
IDENTITY_SIZE = 8  # the body of each marked frame: an epoch frame's and a confirm frame's
_ID_MAX = 2**31 - 1
AUTH_MARK = HELLO_MARK - 2  # an auth frame's offset
AUTH_VERSION = 1
AUTH_NONCE_SIZE = 32
AUTH_MAC_SIZE = 20  # HMAC-SHA1
AUTH_KEY_BYTES_MAX = 64  # an access key is a username (security/model.py: 64 characters)
AUTH_BODY_MAX = 2 + AUTH_KEY_BYTES_MAX + AUTH_MAC_SIZE + AUTH_NONCE_SIZE  # the proof's largest
AUTH_FRAME_MAX = TRANSFER_HEADER_SIZE + AUTH_BODY_MAX
AUTH_SLAVE_CONTEXT = b"OrbitMQ HA v1: slave proves it to master"
AUTH_MASTER_CONTEXT = b"OrbitMQ HA v1: master proves it to slave"


def pack_identity(epoch: int, member: int) -> int:
    if not 0 <= epoch <= _ID_MAX or not 0 <= member <= _ID_MAX:
        raise ValueError(f"epoch {epoch} / member {member} out of range 0..{_ID_MAX}")
    return epoch << 32 | member


def unpack_identity(value: int) -> tuple[int, int]:
    """(epoch, member) of a hello's second value or an epoch frame's body value.

    Raises:
        RemoteProtocolError: a value no peer could have packed (negative, or parts too large).
    """
    epoch, member = value >> 32, value & 0xFFFFFFFF
    if value < 0 or epoch > _ID_MAX or member > _ID_MAX:
        raise RemoteProtocolError(f"HA identity value {value} is not epoch << 32 | member")
    return epoch, member


def encode_hello(epoch: int, member: int) -> bytes:
    """A slave's hello: it follows the master of ``epoch`` and is member ``member``."""
    return _REPORT.pack(HELLO_MARK) + _REPORT.pack(pack_identity(epoch, member))


def encode_epoch_frame(epoch: int, member: int) -> bytes:
    """A master's answer to a hello: it is member ``member``, master of ``epoch``."""
    return _HEADER.pack(HELLO_MARK, IDENTITY_SIZE) + _REPORT.pack(pack_identity(epoch, member))


def encode_confirm_frame(offset: int) -> bytes:
    """A SYNC_MASTER's confirm offset (0..2**63-1): every in-sync member holds the log below it."""
    if not 0 <= offset <= OFFSET_MAX:
        raise ValueError(f"confirm offset {offset} out of range")
    return _HEADER.pack(CONFIRM_MARK, IDENTITY_SIZE) + _REPORT.pack(offset)


def _auth_frame(body: bytes) -> bytes:
    return _HEADER.pack(AUTH_MARK, len(body)) + body


def _key_bytes(access_key: str) -> bytes:
    key = access_key.encode()
    if not 0 < len(key) <= AUTH_KEY_BYTES_MAX:
        raise ValueError(f"an HA access key is 1..{AUTH_KEY_BYTES_MAX} bytes, not {len(key)}")
    return key


def encode_auth_request() -> bytes:
    """The slave's first bytes with authentication on: the version of the handshake it speaks."""
    return _auth_frame(bytes((AUTH_VERSION,)))


def encode_auth_challenge(nonce: bytes) -> bytes:
    """The master's challenge: its first bytes with authentication on, sent on a request."""
    if len(nonce) != AUTH_NONCE_SIZE:
        raise ValueError(f"an HA nonce is {AUTH_NONCE_SIZE} bytes")
    return _auth_frame(bytes((AUTH_VERSION,)) + nonce)


def encode_auth_proof(access_key: str, mac: bytes, nonce: bytes) -> bytes:
    """The slave's answer to a challenge: who it is, its mac, and its own nonce."""
    key = _key_bytes(access_key)
    if len(mac) != AUTH_MAC_SIZE or len(nonce) != AUTH_NONCE_SIZE:
        raise ValueError("an HA proof takes a 20-byte mac and a 32-byte nonce")
    return _auth_frame(bytes((AUTH_VERSION, len(key))) + key + mac + nonce)


def encode_auth_accept(access_key: str, mac: bytes) -> bytes:
    """The master's acceptance of a proof: who it is and its own mac."""
    key = _key_bytes(access_key)
    if len(mac) != AUTH_MAC_SIZE:
        raise ValueError("an HA acceptance takes a 20-byte mac")
    return _auth_frame(bytes((AUTH_VERSION, len(key))) + key + mac)


def _versioned(body: bytes, what: str) -> bytes:
    if not body or body[0] != AUTH_VERSION:
        got = body[0] if body else "none"
        raise RemoteProtocolError(f"HA {what}: version {got}, this broker speaks {AUTH_VERSION}")
    return body[1:]


def _keyed(rest: bytes, what: str) -> tuple[str, bytes]:
    size = rest[0] if rest else 0
    if not 0 < size <= AUTH_KEY_BYTES_MAX or len(rest) < 1 + size:
        raise RemoteProtocolError(f"HA {what}: an access key of {size} bytes (1..{AUTH_KEY_BYTES_MAX})")
    try:
        key = rest[1:1 + size].decode()
    except UnicodeDecodeError:
        raise RemoteProtocolError(f"HA {what}: the access key is not UTF-8") from None
    return key, rest[1 + size:]


def parse_auth_request(body: bytes) -> None:
    """Checks a slave's request. RemoteProtocolError: another version, or more than a version."""
    if _versioned(body, "request"):
        raise RemoteProtocolError(f"HA request: {len(body)} bytes, 1 expected")


def parse_auth_challenge(body: bytes) -> bytes:
    """The master's nonce. RemoteProtocolError: another version or size."""
    nonce = _versioned(body, "challenge")
    if len(nonce) != AUTH_NONCE_SIZE:
        raise RemoteProtocolError(f"HA challenge: a nonce of {len(nonce)} bytes, "
                                  f"{AUTH_NONCE_SIZE} expected")
    return nonce


@dataclasses.dataclass(frozen=True, slots=True)
class AuthProof:
    """A slave's proof (``nonce`` is empty in a master's acceptance)."""

    access_key: str
    mac: bytes = dataclasses.field(repr=False)
    nonce: bytes = dataclasses.field(repr=False, default=b"")


def parse_auth_proof(body: bytes) -> AuthProof:
    """A slave's proof. RemoteProtocolError: another version, or sizes that do not add up."""
    key, rest = _keyed(_versioned(body, "proof"), "proof")
    if len(rest) != AUTH_MAC_SIZE + AUTH_NONCE_SIZE:
        raise RemoteProtocolError(f"HA proof: {len(rest)} bytes after the access key, "
                                  f"{AUTH_MAC_SIZE + AUTH_NONCE_SIZE} expected")
    return AuthProof(key, rest[:AUTH_MAC_SIZE], rest[AUTH_MAC_SIZE:])


def parse_auth_accept(body: bytes) -> AuthProof:
    """A master's acceptance. RemoteProtocolError: another version, or sizes that do not add up."""
    key, rest = _keyed(_versioned(body, "acceptance"), "acceptance")
    if len(rest) != AUTH_MAC_SIZE:
        raise RemoteProtocolError(f"HA acceptance: {len(rest)} bytes after the access key, "
                                  f"{AUTH_MAC_SIZE} expected")
    return AuthProof(key, rest)


def auth_frame_body(buf: bytes | bytearray) -> tuple[bytes, int] | None:
    """The body of the auth frame ``buf`` starts with and the bytes it takes, or None while
    incomplete (the master reads a request and a proof with it: at most :data:`AUTH_FRAME_MAX`
    bytes each).

    Raises:
        RemoteProtocolError: the bytes are not an auth frame (say, a bare report: a slave that
            does not authenticate), judged as soon as the first 8 bytes are there.
    """
    if len(buf) >= REPORT_SIZE:
        (mark,) = _REPORT.unpack_from(buf)
        if mark != AUTH_MARK:
            raise RemoteProtocolError(
                "the first bytes are not an auth frame (a slave that does not authenticate: "
                "authentication is on here)" if mark >= 0 or mark == HELLO_MARK
                else f"the first value {mark} is not an auth frame's mark")
    if len(buf) < TRANSFER_HEADER_SIZE:
        return None
    _, size = _HEADER.unpack_from(buf)
    if not 0 < size <= AUTH_BODY_MAX:
        raise RemoteProtocolError(f"an auth frame of {size} bytes (1..{AUTH_BODY_MAX})")
    end = TRANSFER_HEADER_SIZE + size
    return (bytes(buf[TRANSFER_HEADER_SIZE:end]), end) if len(buf) >= end else None


def encode_report(offset: int) -> bytes:
    """A slave's report: its commit log reaches ``offset`` (0..2**63-1)."""
    if not 0 <= offset <= OFFSET_MAX:
        raise ValueError(f"report offset {offset} out of range")
    return _REPORT.pack(offset)


def encode_transfer_header(offset: int, size: int) -> bytes:
    """The header of a transfer frame of ``size`` bytes from commit log ``offset``."""
    if not 0 <= offset <= OFFSET_MAX or not 0 <= size <= 2**31 - 1:
        raise ValueError(f"transfer header offset={offset} size={size} out of range")
    return _HEADER.pack(offset, size)


class ReportReader:
    """The master's side: bytes from a slave in, the offsets it reported out (any 8 bytes are
    an offset; whether it is plausible is the master's call, not the codec's)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes | bytearray | memoryview) -> list[int]:
        """The reports completed by ``data``, in order (a partial one waits for the rest)."""
        buf = self._pending + bytes(data) if self._pending else bytes(data)
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._pending = buf[whole:]
        return [value for (value,) in _REPORT.iter_unpack(buf[:whole])] if whole else []

    @property
    def buffered(self) -> int:
        """Bytes of a report not complete yet (under REPORT_SIZE)."""
        return len(self._pending)


@dataclasses.dataclass(frozen=True, slots=True)
class TransferFrame:
    """One frame from the master: ``data`` are the commit log bytes at ``offset`` (empty for a
    heartbeat)."""

    offset: int
    data: bytes


class TransferReader:
    """The slave's side: bytes from the master in, whole frames out.

    Args:
        frame_size_max: the largest frame body accepted (a bound on the buffer: a peer cannot
            make the slave hold more than one frame of this size).
    """

    __slots__ = ("frame_size_max", "_buf", "_need")

    def __init__(self, frame_size_max: int) -> None:
        self.frame_size_max = frame_size_max
        self._buf = bytearray()
        self._need: tuple[int, int] | None = None  # (offset, size) of the frame being read

    def feed(self, data: bytes | bytearray | memoryview) -> list[TransferFrame]:
        """The frames completed by ``data``, in order.

        Raises:
            RemoteProtocolError: a header with a negative offset or an impossible size (the
                stream cannot be trusted past it: close the connection).
        """
        buf = self._buf
        buf += data
        frames: list[TransferFrame] = []
        at = 0
        with memoryview(buf) as view:  # released before the buffer is cut below
            while True:
                if self._need is None:
                    if len(buf) - at < TRANSFER_HEADER_SIZE:
                        break
                    offset, size = _HEADER.unpack_from(view, at)
                    marked = (offset in (HELLO_MARK, CONFIRM_MARK) and size == IDENTITY_SIZE
                              or offset == AUTH_MARK and 0 < size <= AUTH_BODY_MAX)
                    if not marked and (offset < 0 or not 0 <= size <= self.frame_size_max):
                        raise RemoteProtocolError(
                            f"HA frame header offset={offset} size={size}: not a frame (sizes "
                            f"0..{self.frame_size_max}, offsets from 0)")
                    at += TRANSFER_HEADER_SIZE
                    self._need = (offset, size)
                offset, size = self._need
                if len(buf) - at < size:
                    break
                frames.append(TransferFrame(offset, bytes(view[at:at + size])))
                at += size
                self._need = None
        if at:
            del buf[:at]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not complete yet (at most a header and frame_size_max)."""
        return len(self._buf)
