"""The stored message format: the bytes of the CommitLog and of a pull response, and the ONLY
Python code that knows them (this package: ``_layout`` the offsets and the checks, ``_encode``
and ``_decode`` the two directions).

One stored message, big-endian (``v4`` hosts; an IPv6 host takes 16 address bytes instead of 4 and
sets its sysFlag bit, which moves every field after it)::

    TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64
    | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST (ip + port i32)
    | STORETIMESTAMP i64 | STOREHOST (ip + port i32) | RECONSUMETIMES i32
    | PREPAREDTRANSACTIONOFFSET i64 | BODY (i32 length + bytes) | TOPIC (u8 length + bytes)
    | PROPERTIES (i16 length + ``k\\x01v\\x02...``, see ``protocol.properties``)

BODYCRC is ``zlib.crc32(body) & 0x7FFFFFFF``. A segment's unused tail starts with an 8-byte entry
(TOTALSIZE = bytes left, BLANK_MAGIC_CODE).

What the module offers, by who needs it:

- encode: ``encode_messages`` (the store's general path: messages with a properties dict),
  ``encode_wire_single`` / ``encode_wire_batch`` (a send's properties text or batch body straight
  to stored form, no message object), ``encode_stored_message`` (one message, every field given);
  all but the last leave QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP to ``patch_positions``,
  which the CommitLog calls under its lock once it knows where the bytes went;
  ``check_wire_batch``, ``encode_wire_batch``'s checks with nothing encoded (a transaction
  batch, stored first as one half message and encoded at its commit).
- scan and verify: ``scan`` (dispatch: what a queue entry and the index need of each message) and
  ``verify`` (recovery: the same checks, plus the offset field and the body CRC).
- peek: ``peek`` / ``iter_peek``, every field but the body, for the filters and bulk readers.
- decode: ``decode_stored_message`` / ``iter_stored_messages`` (MessageExt for the SDK and the
  broker), ``body_of`` (the body of a peeked message), ``stored_columns`` (a whole pull body as
  Arrow-shaped column buffers, for Spark's bulk decode).

Every reader checks a message the same way, so that a malformed one gets the same verdict
everywhere (``problem`` names it): the magic code, TOTALSIZE against the bytes present and the
header, non-negative queue id and queue offset, the body, topic and properties lengths adding up
to TOTALSIZE exactly, the topic (1..127 bytes of UTF-8 that can name a queue directory: no ``/``,
no NUL, not ``.`` or ``..``) and the properties rule. Readers of the body (recovery, decoding)
check its CRC too; dispatch and the filters do not read it.

The hot functions (``encode_wire_single``, ``encode_wire_batch``, ``check_wire_batch``,
``patch_positions``, ``scan``, ``stored_columns``) have a C twin in ``protocol/_native/`` that takes the same arguments and gives the same bytes and the
same refusals (tests/unit/protocol/test_stored_twins.py); ``*_py`` are the Python ones, and the module picks
the C twin unless it is missing or ``ORBITMQ_PURE_PYTHON=1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orbitmq.protocol.native import NATIVE
from orbitmq.protocol.stored._columns import (
    COLUMN_BODY,
    COLUMN_KEYS,
    COLUMN_MSG_ID,
    COLUMN_TAGS,
    StoredColumns,
    stored_columns_py,
)
from orbitmq.protocol.stored._decode import (
    ScanRecord,
    StoredPeek,
    body_of,
    decode_stored_message,
    iter_peek,
    iter_stored_messages,
    peek,
    scan_py,
)
from orbitmq.protocol.stored._encode import (
    EncodedBatch,
    PropertiesSizeError,
    StorableMessage,
    check_wire_batch,
    check_wire_batch_py,
    encode_messages,
    encode_stored_message,
    encode_wire_batch,
    encode_wire_batch_py,
    encode_wire_single,
    encode_wire_single_py,
    patch_positions_py,
    set_prepared_transaction_offset,
)
from orbitmq.protocol.stored._layout import (
    BLANK_ENTRY_SIZE,
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    MIN_STORED_SIZE,
    POSITION_FIELDS_END,
    SCAN_BAD,
    SCAN_BLANK,
    TOPIC_SIZE_MAX,
    body_crc,
    is_blank_entry,
    is_zero_entry,
    pack_host,
    physical_offset_span,
    problem,
    store_timestamp,
    total_size,
    verify,
    write_blank_entry,
)
from orbitmq.protocol.stored._replica import (
    BadEntry,
    ReplicaRun,
    check_replica_run,
    first_bad_entry,
)

__all__ = [
    "MAGIC_CODE",
    "BLANK_MAGIC_CODE",
    "BLANK_ENTRY_SIZE",
    "MIN_STORED_SIZE",
    "POSITION_FIELDS_END",
    "TOPIC_SIZE_MAX",
    "SCAN_BLANK",
    "SCAN_BAD",
    "EncodedBatch",
    "PropertiesSizeError",
    "StoredPeek",
    "ScanRecord",
    "StorableMessage",
    "body_crc",
    "pack_host",
    "encode_messages",
    "encode_wire_single",
    "encode_wire_batch",
    "check_wire_batch",
    "check_wire_batch_py",
    "encode_stored_message",
    "encode_wire_single_py",
    "encode_wire_batch_py",
    "patch_positions",
    "patch_positions_py",
    "set_prepared_transaction_offset",
    "scan_py",
    "scan",
    "verify",
    "problem",
    "peek",
    "iter_peek",
    "body_of",
    "StoredColumns",
    "stored_columns",
    "stored_columns_py",
    "COLUMN_BODY",
    "COLUMN_TAGS",
    "COLUMN_MSG_ID",
    "COLUMN_KEYS",
    "total_size",
    "is_blank_entry",
    "is_zero_entry",
    "write_blank_entry",
    "store_timestamp",
    "physical_offset_span",
    "decode_stored_message",
    "iter_stored_messages",
    "ReplicaRun",
    "check_replica_run",
    "check_replica_entries",
    "BadEntry",
    "check_served",
]

# The C twins when built; the CommitLog and dispatch look these up here at each call.
patch_positions: Callable[[Any, int, int, int, int, list[int]], int] = patch_positions_py
scan: Callable[[Any, int, int, int], tuple[list[ScanRecord], int, int, int]] = scan_py
stored_columns: Callable[[Any, int, int], StoredColumns] = stored_columns_py
if NATIVE is not None:
    patch_positions = NATIVE.patch_positions
    scan = NATIVE.scan_stored
    _native_columns = NATIVE.stored_columns

    def stored_columns(buf: Any, end_offset: int, want: int) -> StoredColumns:
        """The C ``stored_columns`` (see ``stored_columns_py``)."""
        return StoredColumns(*_native_columns(buf, end_offset, want))


def check_replica_entries(buf: Any, first_offset: int, segment_room: int) -> ReplicaRun:
    """``check_replica_run`` with the module's ``scan`` (the C twin when built): a slave's check
    of a frame from its master before storing it (see store/replica_append.py)."""
    return check_replica_run(buf, first_offset, segment_room, scan)


def check_served(buf: Any, first_offset: int) -> BadEntry | None:
    """``first_bad_entry`` with the module's ``scan`` (the C twin when built): a store's check
    of a run of messages before it serves them (store/queue_reader.py)."""
    return first_bad_entry(buf, first_offset, scan)
