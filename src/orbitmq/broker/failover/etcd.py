"""A small etcd v3 client over etcd's JSON gateway (HTTP POST to ``/v3/...``, keys and values
base64, 64-bit numbers as JSON strings), with aiohttp: the few calls failover needs.

Why not a client library: the asyncio etcd v3 packages on PyPI are unmaintained or pull in a
gRPC stack; the gateway is part of every etcd 3.4 server (Debian's ``etcd-server``), stable, and
these five calls are a page of code. Calls: ``range`` (one key or a prefix), ``txn`` (compares,
puts, deletes: every change failover makes is one), ``lease_grant``, ``lease_keepalive`` (one
renewal per call, not a stream: the caller times it) and ``lease_revoke``.

Every answer is checked where it is parsed: a field of the wrong type, a negative revision or
TTL, or a body that is not JSON raises :class:`EtcdError` naming the endpoint and the field;
nothing is coerced silently. An endpoint that does not answer in ``timeout_s`` (or answers an
error) is tried once more on the next endpoint of the list; a call that fails on every endpoint
raises :class:`EtcdUnavailable`. Loop-owned.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from typing import Any

import aiohttp
import orjson

from orbitmq.errors import OrbitMQError

__all__ = ["EtcdClient", "EtcdError", "EtcdUnavailable", "KeyValue", "Compare", "Put", "Delete",
           "TxnResult", "LeaseGrant", "BODY_SIZE_MAX"]

log = logging.getLogger(__name__)

BODY_SIZE_MAX = 4 * 1024 * 1024  # bytes of an answer read (etcd's own request limit is 1.5 MiB)
I64_MAX = 2**63 - 1


class EtcdError(OrbitMQError):
    """etcd answered something this client cannot use (or an error it cannot retry)."""


class EtcdUnavailable(EtcdError):
    """No endpoint answered in time: etcd is unreachable from here (a partition, or down)."""


@dataclasses.dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as etcd holds it: revisions (``create_revision`` 0 never happens here: absent keys
    are not returned), ``version`` (puts since creation) and the lease it is attached to (0:
    none)."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@dataclasses.dataclass(frozen=True, slots=True)
class Compare:
    """A txn condition: ``target`` of ``key`` (MOD, CREATE, VERSION or LEASE revisions/ids;
    0 for an absent key) EQUAL to ``value``."""

    key: bytes
    target: str
    value: int

    def to_json(self) -> dict[str, Any]:
        field = {"MOD": "mod_revision", "CREATE": "create_revision", "VERSION": "version",
                 "LEASE": "lease"}[self.target]
        return {"key": _b64(self.key), "target": self.target, "result": "EQUAL",
                field: str(self.value)}


@dataclasses.dataclass(frozen=True, slots=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0

    def to_json(self) -> dict[str, Any]:
        put: dict[str, Any] = {"key": _b64(self.key), "value": _b64(self.value)}
        if self.lease:
            put["lease"] = str(self.lease)
        return {"request_put": put}


@dataclasses.dataclass(frozen=True, slots=True)
class Delete:
    key: bytes

    def to_json(self) -> dict[str, Any]:
        return {"request_delete_range": {"key": _b64(self.key)}}


@dataclasses.dataclass(frozen=True, slots=True)
class TxnResult:
    """Whether the compares held (then the success ops ran) and the store's revision after."""

    succeeded: bool
    revision: int


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseGrant:
    """A lease's id and the TTL etcd granted (s; 0 from a keepalive: the lease has expired)."""

    lease_id: int
    ttl_s: int


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise EtcdError(f"etcd answer: {what} is {type(value).__name__}, not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise EtcdError(f"etcd answer: {what} is not base64") from None


def _int(obj: dict[str, Any], field: str, *, default: int | None = 0, low: int = 0) -> int:
    """A 64-bit number of an answer (the gateway writes them as strings; absent means 0)."""
    value = obj.get(field)
    if value is None:
        if default is None:
            raise EtcdError(f"etcd answer: {field} is missing")
        return default
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise EtcdError(f"etcd answer: {field} = {value!r} is not a number")
    try:
        number = int(value)
    except ValueError:
        raise EtcdError(f"etcd answer: {field} = {value!r} is not a number") from None
    if not low <= number <= I64_MAX:
        raise EtcdError(f"etcd answer: {field} = {number} is out of range {low}..{I64_MAX}")
    return number


def _kv(obj: object) -> KeyValue:
    if not isinstance(obj, dict):
        raise EtcdError("etcd answer: a kv is not an object")
    return KeyValue(_unb64(obj.get("key"), "key"), _unb64(obj.get("value", ""), "value"),
                    _int(obj, "create_revision", low=1, default=None), _int(obj, "mod_revision", low=1,
                                                                           default=None),
                    _int(obj, "version", low=1, default=None), _int(obj, "lease"))


def prefix_end(prefix: bytes) -> bytes:
    """etcd's range_end for every key starting with ``prefix`` (the prefix plus one)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


class EtcdClient:
    """The calls of the module docstring against ``endpoints`` (``host:port`` each).

    Args:
        endpoints: etcd client URLs' host:port (``controller_addr`` without ``etcd://``).
        timeout_s: one request's bound (``controller_request_timeout_ms``).
    """

    def __init__(self, endpoints: list[str], timeout_s: float) -> None:
        if not endpoints:
            raise EtcdError("no etcd endpoint")
        self.endpoints = list(endpoints)
        self.timeout_s = timeout_s
        self._preferred = 0  # the endpoint that answered last
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=8, force_close=False))
        return self._session

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to each endpoint in turn from the last one that answered; the first answer wins."""
        data = orjson.dumps(body)
        errors: list[str] = []
        count = len(self.endpoints)
        for step in range(count):
            index = (self._preferred + step) % count
            endpoint = self.endpoints[index]
            try:
                answer = await self._post_one(endpoint, path, data)
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                errors.append(f"{endpoint}: {type(e).__name__} {e}".strip())
                continue
            except _Retry as e:  # an endpoint that cannot serve now (no leader, stopping)
                errors.append(f"{endpoint}: {e}")
                continue
            self._preferred = index
            return answer
        raise EtcdUnavailable(f"etcd {path} failed on every endpoint: {'; '.join(errors)}")

    async def _post_one(self, endpoint: str, path: str, data: bytes) -> dict[str, Any]:
        async with self._http().post(f"http://{endpoint}{path}", data=data,
                                     headers={"Content-Type": "application/json"}) as resp:
            raw = await resp.content.read(BODY_SIZE_MAX + 1)
        if len(raw) > BODY_SIZE_MAX:
            raise EtcdError(f"etcd {endpoint}{path}: answer larger than {BODY_SIZE_MAX} bytes")
        try:
            answer = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            raise _Retry(f"HTTP {resp.status}, not JSON: {raw[:200]!r}") from None
        if not isinstance(answer, dict):
            raise EtcdError(f"etcd {endpoint}{path}: the answer is not a JSON object")
        if "error" in answer or resp.status != 200:
            message = str(answer.get("message") or answer.get("error") or f"HTTP {resp.status}")
            if _int(answer, "code", default=0) == 5:  # NOT_FOUND: a lease that is gone
                raise _NotFound(message)
            raise _Retry(f"HTTP {resp.status}: {message}")
        return answer

    # -- calls ----------------------------------------------------------------------------------
    async def range(self, key: bytes, *, prefix: bool = False) -> tuple[list[KeyValue], int]:
        """The key (or every key under the prefix) and the store's revision."""
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_end(key))
        answer = await self._post("/v3/kv/range", body)
        kvs = answer.get("kvs", [])
        if not isinstance(kvs, list):
            raise EtcdError("etcd answer: kvs is not a list")
        return [_kv(kv) for kv in kvs], _revision(answer)

    async def txn(self, compares: list[Compare], success: list[Put | Delete],
                  failure: list[Put | Delete] = ()) -> TxnResult:  # type: ignore[assignment]
        """Run ``success`` if every compare holds, else ``failure``, atomically."""
        answer = await self._post("/v3/kv/txn", {
            "compare": [c.to_json() for c in compares],
            "success": [op.to_json() for op in success],
            "failure": [op.to_json() for op in failure],
        })
        succeeded = answer.get("succeeded", False)
        if not isinstance(succeeded, bool):
            raise EtcdError("etcd answer: succeeded is not a boolean")
        return TxnResult(succeeded, _revision(answer))

    async def lease_grant(self, ttl_s: int) -> LeaseGrant:
        answer = await self._post("/v3/lease/grant", {"TTL": str(ttl_s), "ID": "0"})
        return LeaseGrant(_int(answer, "ID", low=1, default=None), _int(answer, "TTL", low=1,
                                                                        default=None))

    async def lease_keepalive(self, lease_id: int) -> LeaseGrant:
        """Renew once; ``ttl_s`` 0 means the lease has expired (a new one is needed)."""
        try:
            answer = await self._post("/v3/lease/keepalive", {"ID": str(lease_id)})
        except _NotFound:
            return LeaseGrant(lease_id, 0)
        result = answer.get("result", answer)
        if not isinstance(result, dict):
            raise EtcdError("etcd answer: result is not an object")
        return LeaseGrant(lease_id, _int(result, "TTL"))

    async def lease_revoke(self, lease_id: int) -> None:
        try:
            await self._post("/v3/lease/revoke", {"ID": str(lease_id)})
        except _NotFound:
            pass


class _Retry(EtcdError):
    pass


class _NotFound(EtcdError):
    pass


def _revision(answer: dict[str, Any]) -> int:
    header = answer.get("header", {})
    if not isinstance(header, dict):
        raise EtcdError("etcd answer: header is not an object")
    return _int(header, "revision")
