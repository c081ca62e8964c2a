"""Recovery at start: find where valid data ends, cut everything past it, rebuild what depends on it.

1. Scan the commit log from a safe point (the segment holding the oldest checkpoint offset, or the
   first segment without a checkpoint), checking every message: magic, lengths, its own offset
   field, body CRC and well-formed properties. The first failure (or a zero entry) is the end.
2. Truncate the commit log there (the rest of that segment is zeroed, later segments deleted).
3. Consume queues keep only entries that point below ``cut`` (the checkpoint's dispatched offset, or
   the valid end if lower) and match their message; the index forgets entries past ``cut``. The
   store does this for a queue when it first loads it, at the re-dispatch of step 4 or later, so
   the start's cost follows what the crash left, not how many queues exist.
4. Re-dispatch [cut, valid end) so queues and index cover the log again.
A clean exit (no abort file) runs the same steps: they then find nothing to cut.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import stored
from orbitmq.protocol.stored import BLANK_ENTRY_SIZE
from orbitmq.store.checkpoint import StoreCheckpoint
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.mapped_file_queue import MappedFileQueue

__all__ = ["RecoveryReport", "scan_commit_log", "check_message", "entry_checker", "recover_store"]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RecoveryReport:
    """What recovery found and did; ``MessageStore.recovery_report`` after ``start``.

    Attributes:
        last_exit_ok: no abort file was present (the previous run shut down cleanly).
        checkpoint_valid: the checkpoint file was present and intact.
        scan_from: commit log offset the validation scan started at.
        valid_end: where valid data ends; appends continue here.
        truncated_from: set when non-zero bytes past ``valid_end`` were discarded (a torn tail or
            corruption), None when the log simply ended there.
        reason: why the scan stopped (``"end of data"`` when it met zeros or the last segment end).
        corrupted_durable_data: the stop lies below the checkpoint's synced offset, i.e. data that
            had been made durable was damaged (not a torn tail): worth an operator's attention.
        messages_checked: messages validated by the scan.
        queue_entries_dropped: consume queue entries removed (by the start, then by each
            queue's first load: the store loads a queue when it is first used).
        redispatch_from: commit log offset re-dispatch started at.
        messages_redispatched: messages given queue/index entries again.
    """

    last_exit_ok: bool
    checkpoint_valid: bool
    scan_from: int = 0
    valid_end: int = 0
    truncated_from: int | None = None
    reason: str = "end of data"
    corrupted_durable_data: bool = False
    discarded_bytes: int = 0
    messages_checked: int = 0
    queue_entries_dropped: int = 0
    redispatch_from: int = 0
    messages_redispatched: int = 0

    def summary(self) -> str:
        return " ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))


def check_message(view: memoryview, pos: int, phy: int, file_size: int) -> str | None:
    """Why the message at ``pos`` of a segment is not valid, or None when it is: the stored
    codec's checks (``stored.verify``: layout, properties, body CRC), its PHYSICALOFFSET field
    against ``phy``, and room left behind it for the segment's end marker."""
    return stored.verify(view, pos, end=file_size - BLANK_ENTRY_SIZE, physical_offset=phy)


def scan_commit_log(mfq: MappedFileQueue, start: int) -> tuple[int, str, int]:
    """Validate messages from ``start`` (a message boundary) on.

    Returns (offset where valid data ends, why the scan stopped, messages checked).
    """
    offset = start
    count = 0
    file_size = mfq.file_size
    while True:
        mf = mfq.find(offset)
        if mf is None:
            return offset, "end of data", count
        view = mf.view
        base = mf.file_from_offset
        pos = offset - base
        while pos < file_size:
            if pos + BLANK_ENTRY_SIZE > file_size:
                return base + pos, "segment ends inside an entry header", count
            total = stored.total_size(view, pos)
            if stored.is_blank_entry(view, pos):
                if total != file_size - pos:
                    return base + pos, f"blank entry of wrong size {total}", count
                pos = file_size
                break
            if stored.is_zero_entry(view, pos):
                return base + pos, "end of data", count
            problem = check_message(view, pos, base + pos, file_size)
            if problem is not None:
                return base + pos, problem, count
            pos += total
            count += 1
        offset = base + file_size


def entry_checker(commit_log: CommitLog, cq: ConsumeQueue) -> Callable[[int, int, int], bool]:
    """Whether a consume queue entry (index, phy, size) points at its own message."""
    min_phy = commit_log.min_offset

    def is_stored(index: int, phy: int, size: int) -> bool:
        if phy < min_phy:  # its segment was deleted by retention: nothing to compare with
            return True
        raw = commit_log.read(phy, size)
        if raw is None:
            return False
        try:
            p = stored.peek(raw)
        except RemoteProtocolError:
            return False
        return (p.total_size == size and p.queue_id == cq.queue_id and p.queue_offset == index
                and p.topic == cq.topic)

    return is_stored


def recover_store(
    commit_log: CommitLog,
    cut_queues: Callable[[int], int],
    index_truncate: Callable[[int], None] | None,
    redispatch: Callable[[int, int], tuple[int, int]],
    checkpoint: StoreCheckpoint | None,
    last_exit_ok: bool,
) -> RecoveryReport:
    """Run the recovery steps of the module docstring on loaded (not yet started) components.
    ``cut_queues(cut)`` is step 3 for the consume queues (the store cuts each when it loads it:
    message_store.py); it returns the entries dropped."""
    report = RecoveryReport(last_exit_ok=last_exit_ok, checkpoint_valid=checkpoint is not None)
    mfq = commit_log.mfq
    loaded_end = mfq.max_offset
    min_phy = mfq.min_offset
    if checkpoint is not None:
        safe = min(checkpoint.physic_offset, checkpoint.logics_offset, checkpoint.index_offset)
        safe = max(min(safe, loaded_end), min_phy)
        mf = mfq.find(safe) or mfq.last_file()
        scan_from = mf.file_from_offset if mf is not None else min_phy
    else:
        scan_from = min_phy
    valid_end, reason, checked = scan_commit_log(mfq, scan_from)
    report.scan_from, report.valid_end, report.reason = scan_from, valid_end, reason
    report.messages_checked = checked
    if mfq.files:
        discarded = mfq.truncate(valid_end)
        report.discarded_bytes = discarded
        if discarded:
            report.truncated_from = valid_end
            if reason == "end of data":
                report.reason = "zero entry header before non-zero bytes (torn write)"
    _sync_from(mfq, scan_from)
    if report.truncated_from is not None:
        durable = checkpoint.physic_offset if checkpoint is not None else 0
        report.corrupted_durable_data = valid_end < durable
        level = logging.ERROR if report.corrupted_durable_data else logging.WARNING
        log.log(
            level,
            "commit log truncated offset=%d reason=%s discarded_bytes>=%d durable_before=%d",
            valid_end, report.reason, report.discarded_bytes, durable,
        )

    cut = min(checkpoint.logics_offset, valid_end) if checkpoint is not None else min_phy
    cut = max(cut, min_phy)
    report.queue_entries_dropped = cut_queues(cut)
    if index_truncate is not None:
        index_truncate(cut)
    reached, count = redispatch(cut, valid_end)
    report.redispatch_from, report.messages_redispatched = cut, count
    if reached != valid_end:
        log.error("re-dispatch stopped early offset=%d valid_end=%d", reached, valid_end)
    log.info("recovery done %s", report.summary())
    return report


def _sync_from(mfq: MappedFileQueue, offset: int) -> None:
    """Sync what a killed process may have left in the page cache, so the log is durable as found."""
    for mf in mfq.files:
        if mf.file_from_offset + mf.file_size <= offset:
            continue
        mf.flushed_position = 0
        mf.flush()
    mfq.flushed_where = mfq.max_offset
