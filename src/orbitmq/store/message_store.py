"""MessageStore: the facade the broker uses (RocketMQ's DefaultMessageStore).

Layout under ``config.store_path``: ``commitlog/``, ``consumequeue/{topic}/{queueId}/``, ``index/``,
``checkpoint``, ``abort`` (present while running; found at start it means a crash) and ``lock``
(held with ``flock`` while the store is open, and naming the holder's pid: one process at a time).

Saving is two calls, whoever makes them (the broker's durable-save seam, a test, a tool):
``put`` appends and returns at once (thread-safe; it neither waits nor wakes a store thread), and
``durable_up_to(offset)`` is the one durability wait: a future that turns True once every byte
below ``offset`` is synced (one future per group commit, shared by every request of the group).
``wake`` then runs, in the caller's thread, what puts and waits left pending (a sync round,
dispatch); the broker calls it once per event-loop iteration, a blocking caller right after
asking (``orbitmq.testing.store_put.put_durably`` is that blocking put).

Expected outcomes are statuses (status.py), not exceptions; a put the store cannot take now (a
full disk, a failing sync: running_flags.py) is SERVICE_NOT_AVAILABLE with a remark saying why.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from orbitmq.config import FlushDiskType, StoreConfig, StoreType, parse_delay_levels_ms
from orbitmq.errors import ClientError, StoreError
from orbitmq.protocol.lite import is_lite_queue_topic
from orbitmq.store.checkpoint import StoreCheckpoint
from orbitmq.store.clean import CleanService
from orbitmq.store.commit_log import (
    HOT_BYTES,
    CommitLog,
    EncodedBatch,
    InPlaceWriter,
    R,
    encode_messages,
)
from orbitmq.store.compact_consume_queue import CompactConsumeQueue
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.corruption import CorruptionWatch
from orbitmq.store.dispatch import ArrivalListener, DispatchService, ProgressListener
from orbitmq.store.epoch_file import EpochFile
from orbitmq.store.fd_cache import FdCache
from orbitmq.store.file_mode import QueueDirs, parse_file_mode, protect_root
from orbitmq.store.file_ops import FileLock, FileOps, OsFileOps, StoreSpaceError
from orbitmq.store.flush import (
    AsyncFlushService,
    FlushConsumeQueueService,
    GroupCommitService,
    PageReleaseService,
    SmallFolios,
)
from orbitmq.store.fs_sync import FileSystemSync
from orbitmq.store.index_service import IndexService
from orbitmq.store.log_cut import TruncateReport
from orbitmq.store.mapped_consume_queue import MappedConsumeQueue
from orbitmq.store.message_filter import MessageFilter
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.recovery import RecoveryReport, entry_checker, recover_store
from orbitmq.store.replica_copy import ReplicaCopy
from orbitmq.store.running_flags import Condition, PutGuard, RetryGate, RunningFlags
from orbitmq.store.service import ServiceThread
from orbitmq.store.status import (
    PutMessageResult,
    PutMessageStatus,
)
from orbitmq.store.store_lock import check_store_free, lock_store
from orbitmq.store.store_reads import StoreReads
from orbitmq.store.warm import PageWarmService

# check_store_free from store_lock.py, EpochFile and TruncateReport for controller mode's broker;
# MessageFilter (message_filter.py) for the broker's filters
__all__ = ["MessageStore", "MessageFilter", "check_store_free", "EpochFile", "TruncateReport"]

log = logging.getLogger(__name__)


# Queues not used since the start that each clean service round loads (retention needs every
# queue; a start loads none of them): about 0.1-0.2 s of the clean thread per round.
LAZY_LOAD_PER_ROUND_MAX = 2000
INLINE_DISPATCH_MAX = 1024  # messages ``wake`` dispatches in the caller's thread (~5-10 ms)
# Commit log bytes appended after which ``wake`` wakes the PageReleaseService early: its
# interval alone let a broker storing 300 MB/s hold 350 MB of written pages (soak_bench).
RELEASE_STEP_BYTES = 32 * 1024 * 1024


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageStore(StoreReads, ReplicaCopy):
    """A broker's message store (its reads: store_reads.py; a slave's copy: replica_copy.py).

    Args:
        config: store settings.
        clock: wall time in ms (store timestamps, retention ages); default the system clock.
        file_ops: file layer for commit log, queues, checkpoint and abort file; default the OS.
        run_threads: start the background services. Without them (tests, simulation) the caller
            drives ``run_services_once`` (or ``wake``), which also serves durability waits.
        monotonic: the clock spacing retries after a full disk or a failed sync (RunningFlags).
    """

    def __init__(
        self,
        config: StoreConfig,
        *,
        clock: Callable[[], int] | None = None,
        file_ops: FileOps | None = None,
        run_threads: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if config.mapped_file_size_consume_queue % 20:
            raise ClientError("mapped_file_size_consume_queue must be a multiple of 20")
        self.config = config
        self.clock = clock if clock is not None else _wall_clock_ms
        self.file_ops: FileOps = file_ops if file_ops is not None else OsFileOps()
        self.run_threads = run_threads
        root = config.store_path
        self._cq_root = os.path.join(root, "consumequeue")
        self._abort_path = os.path.join(root, "abort")
        self._checkpoint_path = os.path.join(root, "checkpoint")
        self._lock: FileLock | None = None
        self.flags = RunningFlags(monotonic)  # why puts are refused now, if they are
        self.put_guard = PutGuard(self.flags)
        self._segment_gate = self.put_guard.segment_gate  # read on every put
        self.commit_log = CommitLog(root, config.mapped_file_size_commitlog, self.file_ops, self.clock)
        self.commit_log.queue_loader = self._loaded_max_offset
        # The queues loaded so far: a queue found on disk at start is loaded (and recovered
        # against ``_queue_cut``) on first use, so that a start costs what the crash left to
        # redo, not what exists.
        self.consume_queue_table: dict[tuple[str, int], ConsumeQueue] = {}
        self._on_disk: set[tuple[str, int]] = set()  # found at start, not loaded yet
        self._queue_cut = 0  # recovery's cut: what a queue loaded later keeps entries below
        self._load_lock = threading.Lock()  # one loader of a queue at a time
        # store_type compact: one descriptor cache for every compact queue (compact_consume_queue)
        self.queue_fds: FdCache | None = None
        self._queue_dirs = QueueDirs(self._cq_root)  # new compact queues' directories
        # compact queues (store_type compact, and lite topics' queues under either type): many
        # written since the last round are synced at once (fs_sync.py)
        self.fs_sync: FileSystemSync | None = None
        if isinstance(self.file_ops, OsFileOps):
            self.fs_sync = FileSystemSync(self._cq_root)
        if config.store_type == StoreType.COMPACT:
            if not isinstance(self.file_ops, OsFileOps):
                raise ClientError("store_type compact reads and writes queue files directly: "
                                  "it needs the real file system (OsFileOps)")
            self.queue_fds = FdCache(config.compact_queue_fds_max)
        self.index: IndexService | None = None
        if config.message_index_enable:
            self.index = IndexService(
                os.path.join(root, "index"), config.max_hash_slot_num, config.max_index_num,
                clock=self.clock,
            )
        # Parsed once, here (the config checked the text): dispatch gives a delayed message's queue
        # entry its delivery time, and the broker's schedule service reads the levels from here.
        self.delay_levels_ms: tuple[int, ...] = parse_delay_levels_ms(config.message_delay_level)
        self.dispatcher = DispatchService(
            self.commit_log,
            self._find_or_create_cq,
            self.index.build_index if self.index is not None else None,
            self.delay_levels_ms,
            config.dispatch_round_max,
            self.index.put_planned if self.index is not None else None,
        )
        self.dispatcher.space_gate = RetryGate(self.flags, Condition.DISPATCH_STALLED)
        self.sync_flush = config.flush_disk_type == FlushDiskType.SYNC_FLUSH
        flush_gate = RetryGate(self.flags, Condition.FLUSH_FAILED)
        keep_small_folios = SmallFolios(self.commit_log).check if self.sync_flush else None
        self.group_commit = GroupCommitService(  # SYNC_FLUSH: a sync every few appends, kept small
            self.commit_log, config.sync_flush_timeout_ms, gate=flush_gate,
            periodic=self.sync_flush, before_sync=keep_small_folios)
        self.async_flush = AsyncFlushService(self.commit_log, config.flush_interval_commitlog_ms,
                                             gate=flush_gate)
        self.flush_consume_queue = FlushConsumeQueueService(
            config.flush_interval_consume_queue_ms, self.commit_log, self._consume_queues,
            lambda: self.dispatcher.reput_offset, self.index.flush if self.index is not None
            else None, self.file_ops, self._checkpoint_path, self.clock, self.fs_sync)
        self.page_release = PageReleaseService(self.release_cold_pages)
        self._release_at = 0  # commit log offset past which ``wake`` wakes page_release
        # The lowest commit log offset some reader has still to read (the broker sets it from
        # its consumer offsets); None: unknown, so no page is dropped (see _drop_read_pages).
        self.unread_floor: Callable[[], int] | None = None
        self._drop_checked_to = 0  # _drop_read_pages' last candidate end
        self.page_warm = PageWarmService(self.commit_log, sync_ahead=self.sync_flush,
                                         before_warm=keep_small_folios)
        self.clean_service = CleanService(
            config, self.commit_log, self._queues_for_retention,
            self.index.delete_expired if self.index is not None else None,
            self.file_ops, self.clock, self.flags,
        )
        self.recovery_report: RecoveryReport | None = None
        self.corruption = CorruptionWatch(root)  # corrupt messages met (corruption.py)
        # Whether a master's reads are checked too, as a slave's always are (controller mode
        # turns it on: a member elected with a damaged copy must not serve it).
        self.check_reads = config.check_crc_on_read
        self.epochs = EpochFile(root)  # controller mode's epoch list (epoch_file.py)
        self._running = False
        self._replica = False  # a slave's copy: the master's bytes only (append_replicated)
        self._writable = False  # running and not a replica: what a put checks first
        self._state_lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> MessageStore:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self._running

    def _services(self) -> list[ServiceThread]:
        # The group commit serves durability waits under either flush type (see flush.py); the
        # page warming syncs what it warms under SYNC_FLUSH (warm.py).
        pace = [] if self.sync_flush else [self.async_flush]
        return [self.dispatcher, self.group_commit, self.flush_consume_queue, self.clean_service,
                self.page_release, self.page_warm, *pace]

    def start(self) -> None:
        """Lock the store directory, load, recover (see recovery.py), write the abort file, start
        the services. The lock comes first: nothing of the store (abort file, checkpoint,
        segments) is read or written by a process that does not hold it.

        Raises:
            StoreLockedError: another process has the store open (the message names the
                directory and that process's pid).
            StoreError: the store's files are unusable (wrong sizes, a missing segment), or its
                queues cannot be rebuilt for want of space.
        """
        with self._state_lock:
            if self._running:
                return
            # 0700 (store_file_mode's directories): what is made under it inherits its mode.
            protect_root(self.config.store_path, parse_file_mode(self.config.store_file_mode))
            self.file_ops.makedirs(self.config.store_path)
            self._lock = lock_store(self.file_ops, self.config.store_path)
            try:
                if self.fs_sync is not None:
                    self.file_ops.makedirs(self._cq_root)
                    self.fs_sync.open()
                self._load_and_recover()
            except BaseException:
                if self.fs_sync is not None:
                    self.fs_sync.close()
                self._release_lock()
                raise
            self.clean_service.check_disk()
            self._running = True
            self._writable = not self._replica
            if self.run_threads:
                for service in self._services():
                    service.start()
            log.info(
                "store started path=%s max_offset=%d queues=%d",
                self.config.store_path, self.commit_log.max_offset, self.queue_count(),
            )

    def _release_lock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def _load_and_recover(self) -> None:
        fo = self.file_ops
        last_exit_ok = not fo.exists(self._abort_path)
        checkpoint = StoreCheckpoint.load(fo, self._checkpoint_path)
        self.commit_log.mfq.load()
        self._load_consume_queues()
        if self.index is not None:
            self.index.load(last_exit_ok)
        self.recovery_report = recover_store(
            self.commit_log,
            self._cut_queues,
            self.index.truncate_after if self.index is not None else None,
            self._redispatch,
            checkpoint,
            last_exit_ok,
        )
        report = self.recovery_report
        if report.truncated_from is not None and report.corrupted_durable_data:
            self.corruption.found(report.valid_end, report.reason, replica=self._replica,
                                  found_by="recovery")
        self._load_epochs(report.valid_end)
        self.corruption.load()
        self.dispatcher.reput_offset = report.valid_end
        self.commit_log.topic_queue_table = {
            key: cq.max_offset for key, cq in self.consume_queue_table.items()
        }
        self.flush_consume_queue.flush_and_checkpoint()  # the recovered state becomes the checkpoint
        fo.write_file(self._abort_path, b"")

    def _load_epochs(self, end: int) -> None:
        """The epoch list as the file holds it (controller mode: elections compare it with etcd's
        history; a list forgotten at a restart would make the log look older than controller
        mode and cut it to the history's first offset), less the epochs that start past the
        recovered ``end``: recovery cut their bytes, and a member does not claim an epoch it
        holds nothing of. Raises StoreError when the file is unusable."""
        entries = self.epochs.load()
        kept = [e for e in entries if e[1] <= end]
        if kept != entries:
            log.warning("epochs past the recovered end dropped path=%s end=%d epochs=%s",
                        self.config.store_path, end, [e[0] for e in entries[len(kept):]])
            self.epochs.replace(kept)

    def _redispatch(self, start: int, end: int) -> tuple[int, int]:
        """Recovery's re-dispatch. It must reach ``end``: the next queue offsets are taken from
        the queues, so a start with messages left out of them would hand out their offsets again."""
        try:
            return self.dispatcher.dispatch_to(start, end, None)
        except StoreSpaceError as e:
            raise StoreError(
                f"the queues of store {self.config.store_path} cannot be rebuilt after the last "
                f"run ({e}): free space and start again"
            ) from None

    def _load_consume_queues(self) -> None:
        """Find the queues on disk; each is loaded on first use (``_queue``)."""
        fo = self.file_ops
        for topic in fo.listdir(self._cq_root):
            for qid in fo.listdir(os.path.join(self._cq_root, topic)):
                if qid.isdigit():
                    self._on_disk.add((topic, int(qid)))

    def _cut_queues(self, cut: int) -> int:
        """Recovery's step 3 for the loaded queues (none at start); the rest are cut when
        loaded. Returns the entries dropped."""
        self._queue_cut = cut
        return sum(cq.recover(cut, entry_checker(self.commit_log, cq))
                   for cq in list(self.consume_queue_table.values()))

    def _queue(self, key: tuple[str, int], *, create: bool = False) -> ConsumeQueue | None:
        """The queue of ``key``: loaded from disk on first use (recovered against the start's
        cut and its minimum offset corrected, as the start once did for every queue), made when
        ``create``; None when there is none. Thread-safe (dispatch, puts and reads call it)."""
        cq = self.consume_queue_table.get(key)
        if cq is not None or (not create and key not in self._on_disk):
            return cq
        with self._load_lock:
            cq = self.consume_queue_table.get(key)
            if cq is not None:
                return cq
            if key in self._on_disk:
                cq = self._new_cq(*key)
                cq.load()
                dropped = cq.recover(self._queue_cut, entry_checker(self.commit_log, cq))
                if dropped:
                    if self.recovery_report is not None:
                        self.recovery_report.queue_entries_dropped += dropped
                    log.debug("queue cut on first use topic=%s queue=%d entries_dropped=%d",
                              key[0], key[1], dropped)
                cq.correct_min_offset(self.commit_log.min_offset)
            elif create:
                cq = self._new_cq(*key)
            else:
                return None
            self.consume_queue_table[key] = cq
            self._on_disk.discard(key)
            return cq

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """A queue of the store (loaded on first use), None when it has none of that name."""
        return self._queue((topic, queue_id))

    def _loaded_max_offset(self, key: tuple[str, int]) -> int | None:
        """The commit log's question for a queue its offset table lacks (under its put lock)."""
        cq = self._queue(key)
        return None if cq is None else cq.max_offset

    def note_new_queues(self, topic: str, count: int) -> None:
        """The queues ``0..count-1`` of a topic just created or changed: those the store holds
        no trace of (none loaded, none on disk) enter the offset table at 0, so that their
        first send needs no question to the store (the native fast path takes only queues the
        table holds)."""
        clog = self.commit_log
        with clog.put_lock, self._load_lock:
            if self._replica:  # the master's stream says where its queues start
                return
            table = clog.topic_queue_table
            for queue_id in range(count):
                key = (topic, queue_id)
                if (key not in table and key not in self.consume_queue_table
                        and key not in self._on_disk):
                    table[key] = 0

    def load_queues(self, count_max: int | None = None) -> int:
        """Load up to ``count_max`` (all with None) of the queues not used since the start;
        returns how many are left. A running replica's cut and retention need them all."""
        # (a slice of the set, copied in one step: the loads below take keys out of it)
        for key in list(itertools.islice(self._on_disk, count_max)):
            self._queue(key)
        return len(self._on_disk)

    def queue_count(self) -> int:
        """Queues of the store, loaded or not."""
        return len(self.consume_queue_table) + len(self._on_disk)

    def _queues_for_retention(self) -> list[ConsumeQueue]:
        """Every queue, for the clean service: each round loads a bounded share of the ones not
        used since the start, so that their expired files go too, without a start-time cost."""
        if self._on_disk:
            self.load_queues(LAZY_LOAD_PER_ROUND_MAX)
        return self._consume_queues()

    def shutdown(self) -> None:
        """Stop services, make everything durable, write the checkpoint, remove the abort file,
        release the directory lock. If something cannot be synced (a failing disk) the abort
        file stays, so that the next start checks the store as after a crash."""
        with self._state_lock:
            if not self._running:
                return
            with self.commit_log.put_lock:
                self._running = self._writable = False  # no put is half done past this point
            for service in reversed(self._services()):
                service.shutdown()
            synced = self._final_sync()
            if self.index is not None:
                self.index.shutdown()
            for cq in self.consume_queue_table.values():
                cq.close()
            if self.queue_fds is not None:
                self.queue_fds.close()
            if self.fs_sync is not None:
                self.fs_sync.close()
            self.commit_log.close()
            if synced:
                self.file_ops.remove(self._abort_path)
            self._release_lock()
            log.info("store shut down path=%s clean=%s", self.config.store_path, synced)

    def _final_sync(self) -> bool:
        """Dispatch, sync and checkpoint what is left; False when a sync failed."""
        self.dispatcher.run_once()  # a stalled dispatch is redone from the checkpoint at start
        try:
            self.commit_log.flush()
            self.group_commit.run_once()
            self.flush_consume_queue.flush_and_checkpoint()
            if self.index is not None:
                self.index.flush()
        except OSError as e:
            log.error("store stopped without its final sync: the next start recovers as after a "
                      "crash err=%s", e)
            return False
        return True

    def run_services_once(self) -> None:
        """One round of every service, in dependency order (for ``run_threads=False``)."""
        self.dispatcher.run_once()
        if not self.sync_flush:
            self.async_flush.run_once()
        self.group_commit.run_once()  # under ASYNC_FLUSH only when a durability wait asks
        self.flush_consume_queue.run_once()
        self.clean_service.run_once()

    # -- put ------------------------------------------------------------------------------------

    def put(self, batch: Sequence[MessageInner] | EncodedBatch) -> PutMessageResult:
        """Append messages of one topic and queue in one write, with consecutive queue offsets:
        message objects, or messages in stored form already (``protocol.stored``). Returns at
        once and wakes no store thread (the caller runs ``wake`` soon after; the threads' own
        interval is the backstop). Durability: ``durable_up_to(result.append.end_offset)``."""
        if not self._writable or self.flags.remark is not None:
            refused = self._refusal()
            if refused is not None:
                return refused
        if not isinstance(batch, EncodedBatch):
            if not batch:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
            encoded = encode_messages(batch, self.config.max_message_size, self.max_blob_size)
            if isinstance(encoded, PutMessageStatus):
                return PutMessageResult(encoded)
            batch = encoded
        return self._append(batch)

    def put_in_place(self, write: InPlaceWriter[R]) -> R | None:
        """The native fast path's put (CommitLog.append_in_place); None, nothing written, when
        the store refuses puts now or has no segment yet: the caller's ``put`` then answers."""
        if self.flags.remark is not None:
            return None
        return self.commit_log.append_in_place(write, lambda: self._running)

    @property
    def max_blob_size(self) -> int:
        """The most bytes one append may write: a segment less its end marker."""
        return self.config.mapped_file_size_commitlog - 8

    def _append(self, encoded: EncodedBatch) -> PutMessageResult:
        if not self._running:  # stopped while encoding
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
        try:
            appended = self.commit_log.append(encoded)
        except Exception:
            log.exception("append failed topic=%s", encoded.topic)
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR)
        if isinstance(appended, PutMessageStatus):
            if appended is PutMessageStatus.CREATE_MAPPED_FILE_FAILED:  # refused until it can be
                reason = self.put_guard.segment_failed(self.commit_log.segment_error,
                                                       self.config.mapped_file_size_commitlog,
                                                       self.commit_log.mfq.directory)
                return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                        remark=f"service not available now: {reason}")
            return PutMessageResult(appended)
        if self._segment_gate.failing:  # this put made the segment the last one could not
            self._segment_gate.passed()
        return PutMessageResult(PutMessageStatus.PUT_OK, appended)

    def _refusal(self) -> PutMessageResult | None:
        """Why a put is refused now (the slow path, taken only while a condition holds or the
        store is stopped), or None to let it go on (see PutGuard.refusal)."""
        if self._running and self._replica:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=(
                "service not available now: this broker is a slave, it stores its master's "
                "messages only; send to the master of its broker set"))
        remark = "the store is not running" if not self._running else self.put_guard.refusal()
        if remark is None:
            return None
        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                remark=f"service not available now: {remark}")

    def durable_up_to(self, offset: int) -> concurrent.futures.Future[bool]:
        """The one durability wait: a future that turns True once every commit log byte below
        ``offset`` is synced, False when a sync failed or came after ``sync_flush_timeout_ms``.
        Requests made before a round share one future (group commit); the round runs in the
        thread that calls ``wake`` next, or in the group commit thread."""
        return self.group_commit.submit(offset)

    def sync_now(self, offset: int) -> bool | None:
        """``durable_up_to(offset)`` answered by a round in this thread (None: use that)."""
        return self.group_commit.sync_inline(offset)

    def _wake_page_services(self) -> None:
        """Page warming ahead of the appender; every RELEASE_STEP_BYTES appended, the commit
        log pages just written unmapped right here and the page release woken, besides its
        interval, so that the written pages a broker holds follow its write rate. (The release
        thread alone took up to 0.32 s a round, GIL waits included, in a soak storing 650
        MB/s: up to 200 MB more stayed mapped meanwhile, and peak RSS reached 345 MB.)"""
        end = self.commit_log.max_offset
        if end >= self.page_warm.wake_at:
            self.page_warm.wakeup_if_waiting()
        if end >= self._release_at:
            self._release_at = end + RELEASE_STEP_BYTES
            self.commit_log.release_cold_pages(newest=True)
            self.page_release.wakeup_if_waiting()

    def wake(self, *, dispatch: bool = True) -> None:
        """What puts and durability waits left undone, right here: a group commit round in this
        thread unless one is under way or the disk has turned slow (then the group commit thread
        takes it); then dispatch, in this thread too (up to ``INLINE_DISPATCH_MAX`` messages, when
        the dispatch thread is not at it; it is woken for the rest): with one GIL a dispatch
        thread woken per send adds hand-offs, not parallelism. An event loop calls this once per
        iteration, after taking what it read: one sync serves every send of the iteration.
        Without ``dispatch`` only the sync round runs (the caller answers first, then calls)."""
        if not self._running:
            return
        if self.group_commit.has_work() and not self.group_commit.try_run_once():
            if self.run_threads:
                self.group_commit.wakeup()
            else:  # nobody else would run it
                self.group_commit.run_once()
        if not dispatch:
            return
        if not self.dispatcher.dispatch_available(INLINE_DISPATCH_MAX, wait=False):
            self.dispatcher.wakeup_if_waiting()
        self._wake_page_services()

    def release_cold_pages(self) -> None:
        """Unmap the process's view of cold file pages (commit log, consume queues, index): they
        stay in the page cache, but no longer count in the broker's resident size, which then
        stays flat however much is stored. The PageReleaseService calls it five times a second."""
        self.commit_log.release_cold_pages()
        for cq in self._consume_queues():
            cq.release_cold_pages()
        if self.index is not None:
            self.index.release_cold_pages()
        self._drop_read_pages()

    def _drop_read_pages(self) -> None:
        """Drop from the page cache the commit log's synced pages that are older than the newest
        ``page_cache_keep_mb`` and below ``unread_floor`` (every consumer group has read them).

        The kernel keeps every page written while memory is free, so a broker storing hundreds
        of MB/s grows the page cache into memory the machine has not used yet; on a virtual
        machine whose host takes freed memory back (free page reporting), each such page costs
        the host a fault on first touch: new page-cache pages came at 0.45-0.5 GB/s here
        against 0.93-1.1 GB/s when the same writer dropped what it synced 256 MB behind it. A
        dropped page is memory the next appends reuse. A reader of old data (a new group from
        the first offset, a replay) reads it back from the disk. The floor is asked at most once
        per RELEASE_STEP_BYTES appended."""
        keep = self.config.page_cache_keep_mb * 1024 * 1024
        if not keep or self.unread_floor is None:
            return
        end = min(self.commit_log.max_offset - max(keep, HOT_BYTES),
                  self.commit_log.flushed_offset, self.dispatcher.reput_offset)
        if end < self._drop_checked_to + RELEASE_STEP_BYTES:
            return
        self._drop_checked_to = end
        try:
            end = min(end, self.unread_floor())
        except Exception:  # a table or a queue changing under it: the next step asks again
            log.exception("could not tell which commit log pages consumers have read; "
                          "none dropped from the page cache this time")
            return
        self.commit_log.drop_cached_below(end)

    def dispatch_behind_bytes(self) -> int:
        return self.commit_log.max_offset - self.dispatcher.reput_offset

    def wait_dispatched(self, timeout_s: float = 5.0) -> bool:
        """Wait (bounded) until everything appended is in the queues and the index."""
        deadline = time.monotonic() + timeout_s
        while self.dispatch_behind_bytes() > 0:
            if not self.run_threads and self.dispatcher.dispatch_available():
                continue
            if time.monotonic() > deadline:
                return False  # behind, or dispatch stalled (RunningFlags DISPATCH_STALLED)
            self.dispatcher.wakeup()
            time.sleep(0.001)
        return True

    # -- administration -------------------------------------------------------------------------

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """``listener(topic, queue_id, max_offset, tags_code)``, called from the dispatch thread."""
        self.dispatcher.listeners.append(listener)

    def add_dispatch_listener(self, listener: ProgressListener) -> None:
        """``listener(offset)`` after every dispatch round: everything in the commit log below
        ``offset`` is in the consume queues and the index. Called from the thread that
        dispatched (the dispatch thread, or the caller of ``wake``); it must only hand over."""
        self.dispatcher.progress_listeners.append(listener)

    def add_flush_listener(self, listener: Callable[[int], None]) -> None:
        """``listener(offset)`` whenever a SYNC_FLUSH sync round moved the flushed offset:
        everything in the commit log below ``offset`` is on the disk. Called from the thread
        that ran the round (the event loop's, or the group commit thread); it must only hand
        over."""
        self.group_commit.flush_listeners.append(listener)

    def dispatched_offset(self) -> int:
        """The commit log offset below which everything is in the queues and the index."""
        return self.dispatcher.reput_offset

    def delete_topics(self, topics: Iterable[str]) -> int:
        """Drop the queues (and offsets) of ``topics``; commit log data ages out normally."""
        doomed = set(topics)
        deleted = 0
        with self.dispatcher.lock:
            with self._load_lock:  # their files go below: none is loaded from now on
                unloaded = {k for k in self._on_disk if k[0] in doomed}
                self._on_disk -= unloaded
                deleted += len(unloaded)
            for key in [k for k in self.consume_queue_table if k[0] in doomed]:
                cq = self.consume_queue_table.pop(key)
                cq.destroy()
                deleted += 1
            with self.commit_log.put_lock:
                for key in [k for k in self.commit_log.topic_queue_table if k[0] in doomed]:
                    del self.commit_log.topic_queue_table[key]
        for topic in doomed:
            if topic and topic not in (".", "..") and os.sep not in topic:  # never above the queues
                self.file_ops.remove_tree(os.path.join(self._cq_root, topic))
        return deleted

    def clean_expired_files(self) -> None:
        """Run retention now, ignoring ``delete_when`` (RocketMQ's executeDeleteFilesManually)."""
        self.clean_service.request_manual_delete()
        if not self.run_threads:
            self.clean_service.run_once()

    def topics(self) -> set[str]:
        return {t for t, _ in list(self.consume_queue_table)} | {t for t, _ in set(self._on_disk)}

    def queue_ids(self, topic: str) -> list[int]:
        """The ids of ``topic``'s consume queues, in order."""
        return sorted({qid for t, qid in list(self.consume_queue_table) if t == topic}
                      | {qid for t, qid in set(self._on_disk) if t == topic})

    # -- internals ------------------------------------------------------------------------------

    def _consume_queues(self) -> list[ConsumeQueue]:
        return list(self.consume_queue_table.values())

    def _new_cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        """A queue of the store's ``store_type`` (the files are the same either way)."""
        size = self.config.mapped_file_size_consume_queue
        if self.queue_fds is None and is_lite_queue_topic(topic) and isinstance(self.file_ops, OsFileOps):
            # Lite topics are many small queues whatever the store type: an idle one holds no
            # mapping (protocol/lite.py; docs/rocketmq5.md, lite topics).
            self.queue_fds = FdCache(self.config.compact_queue_fds_max)
        if self.queue_fds is not None and (self.config.store_type == StoreType.COMPACT
                                           or is_lite_queue_topic(topic)):
            return CompactConsumeQueue(topic, queue_id, self._cq_root, size, self.file_ops,
                                       self.queue_fds, self.config.compact_queue_bytes_max,
                                       self._queue_dirs)
        return MappedConsumeQueue(topic, queue_id, self._cq_root, size, self.file_ops)

    def _find_or_create_cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queue((topic, queue_id), create=True)
        assert cq is not None
        return cq

