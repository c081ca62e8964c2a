"""What request processors and broker services may use: a narrow context, not the controller.

The BrokerController builds one :class:`BrokerContext` when it is created and hands it to every
processor and service; they never see the controller, so nothing in broker/ imports it but the
package itself (tests/unit/test_import_cycles.py keeps the import graph of broker/ free of
cycles). A processor that needs something else (another processor's hook, the long-poll
service) takes it as an explicit constructor argument.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
import time
from collections.abc import Awaitable, Callable

from orbitmq.broker.dispatch_wait import DispatchWaiter
from orbitmq.broker.durable_save import DurableSave
from orbitmq.broker.metadata_log import MetadataLog
from orbitmq.broker.observability.broker_stats import BrokerStats
from orbitmq.broker.role import RoleState
from orbitmq.broker.tables.client_manager import ClientManager
from orbitmq.broker.tables.consumer_offset_manager import ConsumerOffsetManager
from orbitmq.broker.tables.subscription_group_manager import SubscriptionGroupManager
from orbitmq.broker.tables.topic_config_manager import TopicConfigManager
from orbitmq.config import BrokerConfig
from orbitmq.protocol.command import RemotingCommand
from orbitmq.security.access_table import Permission
from orbitmq.store.message_store import MessageStore

__all__ = ["BrokerContext", "BrokerHost", "ip_of"]


def ip_of(host: str) -> str:
    """An IP literal for ``host`` (stored messages and message ids need one)."""
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return socket.gethostbyname(host)


class BrokerHost:
    """Where the broker is reached and since when: the port is known only once it listens
    (port 0 picks one), so processors read it here at each use.

    Attributes:
        store_host: (ip, port) written into every stored message (STOREHOST).
        boot_timestamp_ms: when the broker last started serving (wall clock).
    """

    __slots__ = ("store_host", "boot_timestamp_ms")

    def __init__(self, ip: str, port: int) -> None:
        self.store_host: tuple[str, int] = (ip, port)
        self.boot_timestamp_ms = int(time.time() * 1000)

    @property
    def address(self) -> str:
        """``ip:port`` clients should use."""
        return f"{self.store_host[0]}:{self.store_host[1]}"

    def listening_on(self, port: int) -> None:
        """The server is up on ``port``: from now on the broker is that port."""
        self.store_host = (self.store_host[0], port)
        self.boot_timestamp_ms = int(time.time() * 1000)


def _allow_all(cmd: RemotingCommand, permission: Permission) -> None:
    """``authorize_found`` without access control: everything found may be served."""


@dataclasses.dataclass(frozen=True, eq=False)
class BrokerContext:
    """The broker's parts a processor may use.

    Attributes:
        config: the settings the broker runs with.
        host: the broker's address (see BrokerHost).
        store: the message store facade (reads; saves go through ``saver``).
        saver: the durable-save seam: every message the broker stores goes through it.
        dispatched: read-your-writes (waits for the store's dispatch, see dispatch_wait.py).
        topics / offsets / sub_groups / clients: the broker's tables.
        stats: the counters the send and pull handlers keep (runtime info, metrics).
        route_published: a future that completes once the name servers have been told the
            current topics (a registration round that starts after the call).
        role: the broker's role now (master or slave; it may change while the broker runs).
        read_bound: the commit log end consumers may be served up to now (None: no bound):
            under SYNC_FLUSH what is synced, in controller mode also the confirm offset
            (BrokerController._read_bound, FailoverService.read_bound); None under ASYNC_FLUSH
            outside controller mode, so pulls pay nothing for it.
        authorize_found: access control for what a handler finds in the store (the real topic
            of a half message, the topic of a message read by offset): raises
            AccessDeniedError when the request's user may not (security/guard.py,
            AccessGuard.authorize_found); a no-op with access control off.
        metadata_log: where a master records a topic, group or committed offset change and
            waits for it to be durable on its slaves before answering (metadata_log.py); None
            in a broker built without it (tests).
    """

    config: BrokerConfig
    host: BrokerHost
    store: MessageStore
    saver: DurableSave
    dispatched: DispatchWaiter
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    sub_groups: SubscriptionGroupManager
    clients: ClientManager
    stats: BrokerStats
    route_published: Callable[[], Awaitable[None]]
    role: RoleState
    read_bound: Callable[[], int | None] | None = None
    authorize_found: Callable[[RemotingCommand, Permission], None] = _allow_all
    metadata_log: MetadataLog | None = None
