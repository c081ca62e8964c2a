"""The admin client's topic creation, by cluster or by broker address.

:meth:`AsyncAdmin.create_topic <orbitmq.client.admin.AsyncAdmin.create_topic>` creates a topic
on every master of a cluster; RocketMQ's tools can also target chosen brokers (``mqadmin
updateTopic -b``), which ``orbitmq topic create --broker-addr`` offers through
:meth:`AsyncAdmin.create_topic_on_brokers`. Both check the settings here, once, and send the same
UPDATE_AND_CREATE_TOPIC to each broker concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orbitmq.client.validation import check_topic
from orbitmq.errors import ClientError
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.headers import CreateTopicRequestHeader

if TYPE_CHECKING:
    from orbitmq.client.admin import AsyncAdmin

__all__ = ["QUEUE_NUMS_MAX", "topic_settings", "create_on", "create_topic_on_brokers"]

QUEUE_NUMS_MAX = 1024  # RocketMQ's tools refuse more queues per broker


def topic_settings(topic: str, *, read_queue_nums: int, write_queue_nums: int, perm: int,
                   order: bool, attributes: str | None = None) -> CreateTopicRequestHeader:
    """The UPDATE_AND_CREATE_TOPIC header of these settings, checked.

    Raises:
        ClientError: a bad topic name or queue counts outside 1..1024.
    """
    check_topic(topic)
    if not (1 <= read_queue_nums <= QUEUE_NUMS_MAX and 1 <= write_queue_nums <= QUEUE_NUMS_MAX):
        raise ClientError(f"queue counts must be within 1..{QUEUE_NUMS_MAX}")
    return CreateTopicRequestHeader(topic, read_queue_nums=read_queue_nums,
                                    write_queue_nums=write_queue_nums, perm=perm, order=order,
                                    attributes=attributes or None)


async def create_on(admin: AsyncAdmin, addrs: Sequence[str],
                    header: CreateTopicRequestHeader) -> None:
    """Send UPDATE_AND_CREATE_TOPIC to every broker of ``addrs`` concurrently.

    Raises:
        BrokerError: a broker refused (the others may have the topic already: run again).
    """
    await asyncio.gather(*(admin._broker(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
                           for addr in addrs))


async def create_topic_on_brokers(
    admin: AsyncAdmin,
    broker_addrs: Sequence[str],
    topic: str,
    *,
    read_queue_nums: int = 8,
    write_queue_nums: int = 8,
    perm: int = 6,
    order: bool = False,
    attributes: str | None = None,
) -> list[str]:
    """Create or update ``topic`` on the brokers at ``broker_addrs`` (host:port each), whatever
    cluster they belong to; the addresses, sorted. ``attributes``: RocketMQ 5's modification
    text, e.g. ``+message.type=FIFO``.

    Raises:
        ClientError: no address, an address that is not host:port, or bad settings.
        BrokerError: a broker refused.
        ConnectionClosedError, TimeoutError: a broker could not be reached or did not answer.
    """
    if isinstance(broker_addrs, str):
        broker_addrs = [broker_addrs]
    addrs = sorted({a.strip() for a in broker_addrs if a.strip()})
    if not addrs:
        raise ClientError("no broker address to create the topic on")
    for addr in addrs:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ClientError(f"broker address {addr!r} is not host:port")
    header = topic_settings(topic, read_queue_nums=read_queue_nums,
                            write_queue_nums=write_queue_nums, perm=perm, order=order,
                            attributes=attributes)
    await create_on(admin, addrs, header)
    return addrs
