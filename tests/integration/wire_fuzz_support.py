"""Mutations and a raw remoting connection for the wire fuzzer (test_wire_fuzz.py).

A mutation replaces header values with huge, negative, non-numeric, empty, long or unicode values,
JSON numbers or nulls where text is usual, a number next to the valid one (a bit flipped, a small
step: what gets past a range or a mask check but means nothing, like a transaction verdict of 4),
drops fields, adds unknown ones, or garbles a body (truncated, bytes flipped, a value deep in its
JSON replaced, repeated). RawClient sends headers
built by hand, so that extFields values may be any JSON scalar, as some clients send them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import struct
from dataclasses import dataclass, field
from typing import Any

import orjson

from orbitmq.protocol.codes import SerializeType
from orbitmq.protocol.command import RemotingCommand, encode
from orbitmq.protocol.frame import FrameDecoder
from orbitmq.security import Credentials, sign_fields

__all__ = ["Request", "mutate", "neighbour", "json_text", "RawClient"]

# ------------------------------------------------------------------------------ mutation values
HUGE = ["99999999999999999999", "9223372036854775808", "-9223372036854775809", "2147483648",
        "-2147483649", "4294967296", "18446744073709551616", "1" + "0" * 400]
EDGES = ["0", "-1", "-2", "1", "2147483647", "-2147483648", "9223372036854775807", "65535",
         "32", "2048", "255"]
NOT_NUMBERS = ["", " ", "abc", "1e5", "1.5", "0x10", "NaN", "true", "²", "١٢", "+7", " 12 ", "1_0"]
TEXTS = ["é", "😀", "日本語", "\u202e", "\x00", "\x01\x02", "%RETRY%x", "%DLQ%x", "a/b", "..",
         "a@b", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "*", "a||b", "DELAY\x019\x02",
         "TRAN_MSG\x01true\x02", "UNIQ_KEY\x01\x02KEYS\x01\x01\x02"]
# JSON values where text is usual (the C++ client sends numbers); an array or an object as an
# extFields value makes the whole header garbage (the connection is closed, as for bad JSON), so
# those only go into bodies.
JSON_SCALARS: list[Any] = [0, -1, 2**31, 2**63, 10**20, 1.5, 1e300, True, False, None]
JSON_VALUES: list[Any] = [*JSON_SCALARS, [], {}, [1, "a"], {"a": {}}]


def _value(rng: random.Random, *, in_header: bool = True) -> Any:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.choice(HUGE)
    if kind == 1:
        return rng.choice(EDGES)
    if kind == 2:
        return rng.choice(NOT_NUMBERS)
    if kind == 3:
        return rng.choice(TEXTS) * rng.choice((1, 1, 3, 50))
    if kind == 4:
        return rng.choice("xyzé😀") * rng.choice((128, 1000, 20_000))
    return rng.choice(JSON_SCALARS if in_header else JSON_VALUES)


def neighbour(rng: random.Random, value: Any) -> Any | None:
    """A number next to ``value`` when it is an integer (as text or a JSON number): one of its low
    bits flipped or a small step, as text or as a JSON number; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    if rng.random() < 0.5:
        number ^= 1 << rng.randrange(8)
    else:
        number += rng.choice((-4, -2, -1, 1, 2, 4))
    # A JSON number beyond 64 bits makes the whole header garbage (as a 400-digit one does for any
    # JSON parser): such neighbours stay text.
    as_json = -(2**63) <= number < 2**64 and rng.random() < 0.3
    return number if as_json else str(number)


def _mutate_json(rng: random.Random, obj: Any) -> Any:
    """A copy of parsed JSON with one value (anywhere) replaced, or a key dropped."""
    if isinstance(obj, dict) and obj:
        key = rng.choice(list(obj))
        out = dict(obj)
        if rng.random() < 0.2:
            del out[key]
        elif rng.random() < 0.6:
            out[key] = _mutate_json(rng, obj[key])
        else:
            out[key] = _json_scalar(rng)
        return out
    if isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        return [*obj[:i], _mutate_json(rng, obj[i]), *obj[i + 1:]]
    return _json_scalar(rng)


def _json_scalar(rng: random.Random) -> Any:
    value = _value(rng, in_header=False)
    if isinstance(value, str) and rng.random() < 0.5:
        try:
            return int(value)  # numbers as JSON numbers, huge ones included
        except ValueError:
            return value
    return value


def _json_bytes(obj: Any) -> bytes:
    """JSON of ``obj``, integers beyond 64 bits included (orjson refuses those)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def json_text(value: Any) -> str:
    """What a binary (ROCKETMQ) header carries for a value that is not text: its JSON."""
    return _json_bytes(value).decode()


def _mutate_body(rng: random.Random, body: bytes) -> bytes:
    if not body:
        return rng.choice([b"", b"{}", b"[]", b"null", b"\xff\xfe", b'{"a":'])
    kind = rng.randrange(5)
    if kind == 0:
        return body[: rng.randrange(len(body))]
    if kind == 1:
        data = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == 2 and body[:1] in (b"{", b"["):
        try:
            return _json_bytes(_mutate_json(rng, orjson.loads(body)))
        except orjson.JSONDecodeError:  # mutated before
            return body[::-1]
    if kind == 3:
        return body + body[: rng.randrange(len(body) + 1)]
    return b"\x00" * rng.choice((1, 13, 100))


@dataclass
class Request:
    target: str  # "broker" or "namesrv"
    code: int
    fields: dict[str, Any]
    body: bytes = b""
    mutations: list[str] = field(default_factory=list)


def mutate(rng: random.Random, req: Request) -> Request:
    """One to three mutations of a valid request."""
    fields, body = dict(req.fields), req.body
    done: list[str] = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        roll = rng.random()
        if roll < 0.6 and fields:
            key = rng.choice(list(fields))
            near = neighbour(rng, fields[key]) if rng.random() < 0.25 else None
            fields[key] = _value(rng) if near is None else near
            done.append(f"{key}={str(fields[key])[:40]!r}")
        elif roll < 0.7 and fields:
            key = rng.choice(list(fields))
            del fields[key]
            done.append(f"-{key}")
        elif roll < 0.75:
            fields["extra"] = _value(rng)
            done.append("+extra")
        else:
            body = _mutate_body(rng, body)
            done.append(f"body[{len(body)}]")
    return Request(req.target, req.code, fields, body, done)


def wire_text(value: Any) -> str | None:
    """What the server's decoder makes of an extFields value (None: left out), which is what a
    signature covers."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def signed(req: Request, credentials: Credentials) -> Request:
    """``req`` with AccessKey and a Signature over its fields as the server will read them."""
    fields = {k: wire_text(v) for k, v in req.fields.items()
              if k not in ("AccessKey", "Signature", "SecurityToken")}
    text = {k: v for k, v in fields.items() if v is not None}
    sign_fields(text, req.body, credentials)
    return Request(req.target, req.code, {**req.fields, **{k: text[k] for k in (
        "AccessKey", "Signature", "SecurityToken") if k in text}}, req.body, req.mutations)


# ------------------------------------------------------------------------------ the wire
class RawClient:
    """One connection sending hand-made headers (extFields values of any JSON type)."""

    def __init__(self, credentials: Credentials | None = None) -> None:
        self.credentials = credentials  # signs every request it sends (access control on)
        self._opaques = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self.closed_by_peer = False

    async def connect(self, addr: str) -> RawClient:
        host, _, port = addr.rpartition(":")
        reader, self._writer = await asyncio.open_connection(host, int(port))
        self._reader_task = asyncio.create_task(self._read(reader))
        return self

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            for cmd in decoder.feed(data):
                if not cmd.is_response:  # the broker's own requests (consumer ids changed...)
                    continue
                fut = self._pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
        self.closed_by_peer = True
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("closed by the server"))

    def _frame(self, req: Request, opaque: int, binary: bool) -> bytes:
        if self.credentials is not None:
            req = signed(req, self.credentials)
        if binary:
            ext = {str(k): v if isinstance(v, str) else json_text(v)
                   for k, v in req.fields.items()}
            cmd = RemotingCommand(req.code, opaque, 0, ext_fields=ext, body=req.body,
                                  serialize_type=SerializeType.ROCKETMQ)
            return encode(cmd)
        header = _json_bytes({"code": req.code, "language": "JAVA", "version": 401,
                              "opaque": opaque, "flag": 0, "extFields": req.fields})
        return struct.pack(">ii", 4 + len(header) + len(req.body), len(header)) + header + req.body

    async def request(self, req: Request, timeout: float, *, binary: bool = False
                      ) -> RemotingCommand | None:
        """The answer, or None when none came within ``timeout``.

        Raises:
            ConnectionError: the server closed the connection (before or while waiting).
        """
        assert self._writer is not None
        if self.closed_by_peer:
            raise ConnectionError("closed by the server")
        opaque = next(self._opaques)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[opaque] = fut
        self._writer.write(self._frame(req, opaque, binary))
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            self._pending.pop(opaque, None)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)
