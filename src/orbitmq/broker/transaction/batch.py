"""Transactions by the batch (OrbitMQ): the layout of a batch's half message, what its commit
stores, and how a commit a crash cut short is recognised.

A batch is ONE half message, so that every rule of single transactions holds for it unchanged
(one origin, one outcome, one check at a time, re-stored copies, discard after the check limit,
immunity, op messages read back at start):

- its body is the batch body the producer sent (``protocol.batch``: each message with its own
  properties and UNIQ_KEY), its properties the batch's own plus the half message's (REAL_TOPIC,
  REAL_QID, PGROUP) and TRAN_BATCH = the number of messages;
- a commit re-stores every message under the real topic and queue in ONE append (stored form
  straight from the batch body, sysFlag commit, PREPAREDTRANSACTIONOFFSET = the half message),
  then writes the op message, as a single commit does;
- a rollback writes the op message only.

A crash between the commit's append and its op message leaves the batch pending with (part of)
its messages delivered. The store recovers a commit log up to the first damaged message, so what
survives of one append is a prefix of it: the batch's first and last UNIQ_KEYs in the index say
"none", "all" or "a prefix", and a prefix means the verdict was COMMIT (nothing else stores those
messages), so recovery stores the rest and nothing is delivered twice or lost.
"""

from __future__ import annotations

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.extension_headers import TRAN_BATCH
from orbitmq.protocol.message import TRANSACTION_TYPE_MASK, MessageExt, MessageSysFlag, PropertyKey
from orbitmq.protocol.stored import (
    EncodedBatch,
    encode_wire_batch,
    set_prepared_transaction_offset,
)
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.message_store import MessageStore

__all__ = ["TRAN_BATCH", "is_batch", "batch_size", "committed_batch", "uniq_keys",
           "delivered_part"]

_COMMIT = int(MessageSysFlag.TRANSACTION_COMMIT_TYPE)
_QUERY_MAX = 32  # index hits read per key: a UNIQ_KEY names one message (a resend: a few)


def is_batch(half: MessageExt) -> bool:
    """Whether ``half`` is the half message of a transaction batch."""
    return TRAN_BATCH in half.properties


def batch_size(half: MessageExt) -> int:
    """The number of messages a batch half message holds (1 for a single one)."""
    raw = half.properties.get(TRAN_BATCH, "1")
    return int(raw) if raw.isdigit() else 1


def _target(half: MessageExt) -> tuple[str, int]:
    props = half.properties
    return props[PropertyKey.REAL_TOPIC], int(props.get(PropertyKey.REAL_QID, "0") or 0)


def committed_batch(half: MessageExt, store_host: tuple[str, int], store: MessageStore,
                    skip: frozenset[str] = frozenset()) -> EncodedBatch | list[MessageInner]:
    """What a commit of ``half`` appends: every message of the batch (but those whose UNIQ_KEY
    is in ``skip``, already delivered) under the real topic and queue, sysFlag commit.

    Raises:
        RemoteProtocolError: the stored body is no longer a valid batch (it was checked when the
            half message was stored: only a damaged store gets here).
    """
    topic, queue_id = _target(half)
    if not skip:
        encoded = encode_wire_batch(
            topic, queue_id, half.body, _COMMIT, half.born_timestamp, half.born_host, store_host,
            half.reconsume_times, store.config.max_message_size, store.max_blob_size)
        if encoded is None:
            raise RemoteProtocolError("a transaction batch holds a delayed or transaction message")
        set_prepared_transaction_offset(encoded, half.commit_log_offset)
        return encoded
    out = []
    for flag, body, props in decode_batch(half.body):
        if props.get(PropertyKey.UNIQ_KEY) in skip:
            continue
        msg = MessageInner(topic, queue_id, body, props, flag, _COMMIT, half.born_timestamp,
                           half.born_host, store_host, half.reconsume_times)
        msg.prepared_transaction_offset = half.commit_log_offset
        out.append(msg)
    return out


def uniq_keys(half: MessageExt) -> list[str]:
    """The UNIQ_KEY of every message of the batch, in order (each has one: checked when stored).

    Raises:
        RemoteProtocolError: the stored body is no longer a valid batch.
    """
    return [props.get(PropertyKey.UNIQ_KEY, "") for _flag, _body, props in decode_batch(half.body)]


def _delivered(store: MessageStore, topic: str, uniq: str) -> bool:
    found = store.query_message(topic, uniq, _QUERY_MAX)
    return any(m.uniq_key == uniq and m.sys_flag & TRANSACTION_TYPE_MASK == _COMMIT for m in found)


def delivered_part(store: MessageStore, half: MessageExt) -> frozenset[str]:
    """The UNIQ_KEYs of the batch's messages already in the real topic (by the index): none, all,
    or a prefix of the batch (see the module docstring). Two index lookups unless a prefix."""
    keys = uniq_keys(half)
    topic, _ = _target(half)
    if not keys or not _delivered(store, topic, keys[0]):
        return frozenset()
    if _delivered(store, topic, keys[-1]):
        return frozenset(keys)
    return frozenset(k for k in keys if _delivered(store, topic, k))
