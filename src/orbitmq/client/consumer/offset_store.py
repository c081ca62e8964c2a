"""Where a push consumer's offsets live: on the brokers (clustering) or in a local file
(broadcasting, where every member has its own progress).

Both keep an in-memory table (the next offset to consume per queue) that consumption updates as
messages are acknowledged, and persist it every ``persist_consumer_offset_interval_ms`` and
at shutdown. ``read_from_store`` answers -1 when the store has no offset of the group for a queue:
the consumer then applies its ``consume_from``.

The local file, ``{offset_store_dir}/{instance_name}/{group}/offsets.json``, is written atomically
(temporary file, fsync, rename, directory fsync), so a crash leaves the old or the new table, never
a torn one::

    {"group": "g", "offsetTable": [{"topic": "T", "brokerName": "broker-a", "queueId": 0,
                                    "offset": 42}, ...]}
"""

from __future__ import annotations

import abc
import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import orjson

from orbitmq.client.instance import check_response
from orbitmq.errors import ClientError
from orbitmq.files import replace_file
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)

__all__ = ["OffsetStore", "RemoteOffsetStore", "LocalOffsetStore", "BrokerInvoker"]

log = logging.getLogger(__name__)

# (queue, request code, header) -> the broker's answer; raises on transport failures.
BrokerInvoker = Callable[[MessageQueue, int, Any], Awaitable[RemotingCommand]]


class OffsetStore(abc.ABC):
    """The in-memory offset table and its persistence."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._table: dict[MessageQueue, int] = {}

    async def load(self) -> None:  # noqa: B027 - a hook: only the local store has a file
        """Read what persistence holds (the local file); nothing for the brokers."""

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        """Set ``mq``'s next offset; with ``increase_only`` never move it back."""
        if offset < 0:
            return
        if increase_only and self._table.get(mq, -1) >= offset:
            return
        self._table[mq] = offset

    def read(self, mq: MessageQueue) -> int:
        """The in-memory offset of ``mq``, -1 when there is none."""
        return self._table.get(mq, -1)

    def remove(self, mq: MessageQueue) -> None:
        """Forget ``mq`` (after persisting it, when the queue went to another member)."""
        self._table.pop(mq, None)

    def table(self) -> dict[MessageQueue, int]:
        return dict(self._table)

    @abc.abstractmethod
    async def read_from_store(self, mq: MessageQueue) -> int:
        """The persisted offset of ``mq`` (-1 when none); raises when the store cannot say."""

    @abc.abstractmethod
    async def persist(self, mqs: Collection[MessageQueue]) -> None:
        """Persist the in-memory offsets of ``mqs``; raises the first failure."""


class RemoteOffsetStore(OffsetStore):
    """Clustering: offsets on the broker of each queue (QUERY/UPDATE_CONSUMER_OFFSET)."""

    def __init__(self, group: str, invoke: BrokerInvoker) -> None:
        super().__init__(group)
        self._invoke = invoke
        self._persisted: dict[MessageQueue, int] = {}

    async def read_from_store(self, mq: MessageQueue) -> int:
        header = QueryConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id)
        resp = await self._invoke(mq, RequestCode.QUERY_CONSUMER_OFFSET, header)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        check_response(resp)
        offset = QueryConsumerOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset
        self._persisted[mq] = offset
        return offset

    async def persist(self, mqs: Collection[MessageQueue]) -> None:
        todo = [(mq, self._table[mq]) for mq in sorted(mqs)
                if mq in self._table and self._persisted.get(mq) != self._table[mq]]
        results = await asyncio.gather(*(self._commit(mq, off) for mq, off in todo),
                                       return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    async def _commit(self, mq: MessageQueue, offset: int) -> None:
        header = UpdateConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id, offset)
        check_response(await self._invoke(mq, RequestCode.UPDATE_CONSUMER_OFFSET, header))
        self._persisted[mq] = offset

    def note_committed(self, mq: MessageQueue, offset: int) -> None:
        """The broker stored ``offset`` through a pull's piggybacked commit."""
        self._persisted[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        super().remove(mq)
        self._persisted.pop(mq, None)


class LocalOffsetStore(OffsetStore):
    """Broadcasting: offsets in a JSON file of this consumer (see the module docstring)."""

    def __init__(self, group: str, path: str) -> None:
        super().__init__(group)
        self.path = path
        self._file: dict[MessageQueue, int] = {}
        self._write_lock = asyncio.Lock()

    async def load(self) -> None:
        self._file = await asyncio.to_thread(_read_file, self.path)
        self._table.update(self._file)

    async def read_from_store(self, mq: MessageQueue) -> int:
        return self._file.get(mq, -1)

    async def persist(self, mqs: Collection[MessageQueue]) -> None:
        async with self._write_lock:
            merged = dict(self._file)
            merged.update({mq: self._table[mq] for mq in mqs if mq in self._table})
            if merged == self._file and os.path.exists(self.path):
                return
            await asyncio.to_thread(_write_file, self.path, self.group, merged)
            self._file = merged


def _read_file(path: str) -> dict[MessageQueue, int]:
    try:
        with open(path, "rb") as f:
            data = orjson.loads(f.read())
    except FileNotFoundError:
        return {}
    except (OSError, orjson.JSONDecodeError) as e:
        raise ClientError(f"cannot read the offset file {path}: {e}") from None
    table: dict[MessageQueue, int] = {}
    for row in data.get("offsetTable", []):
        mq = MessageQueue(str(row["topic"]), str(row["brokerName"]), int(row["queueId"]))
        table[mq] = int(row["offset"])
    return table


def _write_file(path: str, group: str, table: dict[MessageQueue, int]) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    rows = [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
             "offset": off} for mq, off in sorted(table.items())]
    data = orjson.dumps({"group": group, "offsetTable": rows}, option=orjson.OPT_INDENT_2)
    replace_file(path, data, None)
