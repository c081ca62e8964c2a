"""The message as the broker hands it to the store (RocketMQ's MessageExtBrokerInner)."""

from __future__ import annotations

import dataclasses

from orbitmq.protocol.message import PropertyKey, tags_hash

__all__ = ["MessageInner"]


@dataclasses.dataclass(slots=True)
class MessageInner:
    """A message to append. The store assigns offsets and the store timestamp.

    ``sys_flag`` carries the transaction type and the compressed bit; the host kind bits are set by
    the store from the hosts given.
    """

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags_code(self) -> int:
        """The ConsumeQueue tags code: Java hashCode of TAGS (0 without tags)."""
        return tags_hash(self.properties.get(PropertyKey.TAGS))
