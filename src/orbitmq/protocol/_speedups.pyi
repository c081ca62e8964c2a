# Types of the optional C speedups (_speedups.c): the C twins of orbitmq.protocol.stored's
# *_py functions (same arguments, same results, same refusals) and of java_hash.
from typing import Any

def java_string_hash(s: str, /) -> int: ...
def index_key_hash(topic: str, key: str, /) -> int: ...
def encode_wire_batch(
    body: Any, topic_part: bytes, queue_id: int, sys_flag: int, born_timestamp: int,
    born_host: bytes, store_host: bytes, reconsume_times: int, max_message_size: int,
    max_blob_size: int, /,
) -> tuple[bytearray, list[int]] | None: ...
def check_wire_batch(
    body: Any, topic_part: bytes, queue_id: int, sys_flag: int, born_timestamp: int,
    born_host: bytes, store_host: bytes, reconsume_times: int, max_message_size: int,
    max_blob_size: int, /,
) -> tuple[int, int] | None: ...
def encode_wire_single(
    body: Any, properties: bytes, flag: int, topic_part: bytes, queue_id: int, sys_flag: int,
    born_timestamp: int, born_host: bytes, store_host: bytes, reconsume_times: int, /,
) -> bytearray | None: ...
def patch_positions(
    buf: Any, pos: int, physical_offset: int, queue_offset: int, store_ts: int,
    rel_positions: list[int], /,
) -> int: ...
def scan_stored(
    buf: Any, pos: int, limit: int, count_max: int, /,
) -> tuple[
    list[tuple[int, int, int, int, int, bytes, int, str | None, str | None, str | None]],
    int, int, int,
]: ...
def stored_columns(
    buf: Any, end_offset: int, want: int, /,
) -> tuple[int, int, bytearray, bytearray, bytearray, bytearray, bytearray, bytearray, bytearray,
           bytearray, bytearray, bytearray, bytearray, bytearray, bytearray, bytearray, bytearray]: ...
def encode_batch_columns(
    bodies: Any, keys: Any, tags: Any, properties: Any, flags: Any, ids: Any, start: int,
    rows_max: int, bytes_max: int, message_size_max: int, reserved: frozenset[str], /,
) -> tuple[bytes, int, str]: ...
def queue_runs(
    entries: Any, count_max: int, bytes_max: int, max_physical_end: int, /,
) -> tuple[list[tuple[int, int]], int, int, int, int, int]: ...
