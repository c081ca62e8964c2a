# Types of the protocol's C twins (protocol/_native/*.c), orbitmq._native._speedups.protocol:
# the stored codec's *_py functions (same arguments, same results, same refusals), the column
# encoder, java_hash, zlib's CRC-32 and HMAC-SHA1. tests/unit/_native/test_native_speedups.py holds the
# names here to the module's.
from typing import Any, Protocol

class ProtocolNative(Protocol):
    CRC32_FROM_ZLIB: int  # crc32 calls libz's own function
    CRC32_CLMUL: int  # crc32 folds with PCLMULQDQ (x86-64 CPUs that have it)
    SHA1_NI: int  # hmac_sha1 runs on the SHA extensions

    def java_string_hash(self, s: str, /) -> int: ...
    def crc32(self, buf: Any, /) -> int: ...
    def encode_wire_single(
        self, body: Any, properties: bytes, flag: int, topic_part: bytes, queue_id: int,
        sys_flag: int, born_timestamp: int, born_host: bytes, store_host: bytes,
        reconsume_times: int, /,
    ) -> bytearray | None: ...
    def encode_wire_batch(
        self, body: Any, topic_part: bytes, queue_id: int, sys_flag: int, born_timestamp: int,
        born_host: bytes, store_host: bytes, reconsume_times: int, max_message_size: int,
        max_blob_size: int, /,
    ) -> tuple[bytearray, list[int]] | None: ...
    def check_wire_batch(
        self, body: Any, topic_part: bytes, queue_id: int, sys_flag: int, born_timestamp: int,
        born_host: bytes, store_host: bytes, reconsume_times: int, max_message_size: int,
        max_blob_size: int, /,
    ) -> tuple[int, int] | None: ...
    def patch_positions(
        self, buf: Any, pos: int, physical_offset: int, queue_offset: int, store_ts: int,
        rel_positions: list[int], /,
    ) -> int: ...
    # (records: (pos, size, queue id, queue offset, store ts, topic, tags code, keys, uniq key,
    # delay), position reached, messages read, stop)
    def scan_stored(
        self, buf: Any, pos: int, limit: int, count_max: int, /,
    ) -> tuple[
        list[tuple[int, int, int, int, int, bytes, int, str | None, str | None, str | None]],
        int, int, int,
    ]: ...
    # (messages read, rows kept, then the 15 column buffers of stored.StoredColumns)
    def stored_columns(self, buf: Any, end_offset: int, want: int, /) -> tuple[Any, ...]: ...
    def encode_batch_columns(
        self, bodies: Any, keys: Any, tags: Any, properties: Any, flags: Any, ids: Any,
        start: int, rows_max: int, bytes_max: int, message_size_max: int,
        reserved: frozenset[str], /,
    ) -> tuple[bytes, int, str]: ...
    def hmac_sha1(self, key: bytes, data: bytes, fips: bool = ..., /) -> bytes: ...

NATIVE: ProtocolNative | None
