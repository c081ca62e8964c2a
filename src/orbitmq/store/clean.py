"""Retention: delete old commit log segments, then the queue and index data pointing into them.

A segment may go once it is older than ``file_reserved_time_hours`` (its age is the store time of
the first message of the *next* segment, which is at least as new as anything in it), and only
when deleting is due: at the hours of ``delete_when``, when disk use passes
``disk_max_used_space_ratio``, or on request. Past ``disk_space_clean_forcibly_ratio`` the oldest
segments go even if young. The segment being written is never deleted.

Above ``disk_space_warning_level_ratio`` the store refuses puts (RunningFlags DISK_RATIO) until a
later round measures less: each round measures again, so freeing space ends the refusal within
``clean_resource_interval_ms``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable

from orbitmq.config import StoreConfig
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.file_ops import FileOps
from orbitmq.store.mapped_file import MappedFile
from orbitmq.store.running_flags import Condition, RunningFlags
from orbitmq.store.service import ServiceThread

__all__ = ["CleanService"]

log = logging.getLogger(__name__)


class CleanService(ServiceThread):
    """Runs retention every ``clean_resource_interval_ms``."""

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        consume_queues: Callable[[], Iterable[ConsumeQueue]],
        index_delete_expired: Callable[[int], None] | None,
        file_ops: FileOps,
        clock: Callable[[], int],
        flags: RunningFlags | None = None,
    ) -> None:
        super().__init__("orbitmq-clean", config.clean_resource_interval_ms / 1000)
        self.config = config
        self.commit_log = commit_log
        self._consume_queues = consume_queues
        self._index_delete_expired = index_delete_expired
        self._file_ops = file_ops
        self._clock = clock
        self.flags = flags if flags is not None else RunningFlags()
        self.disk_full = False  # above disk_space_warning_level_ratio: puts are refused
        self._manual_requests = 0

    def request_manual_delete(self) -> None:
        """Delete expired segments on the next round regardless of ``delete_when``."""
        self._manual_requests += 1
        self.wakeup()

    def run_once(self) -> None:
        self.delete_expired_commit_log()
        self.clean_queues()

    def _disk_ratio(self) -> float:
        try:
            # The store directory: it exists before the first commit log segment does.
            return self._file_ops.disk_used_ratio(os.path.dirname(self.commit_log.mfq.directory))
        except OSError:
            return 0.0

    def _is_delete_hour(self, now_ms: int) -> bool:
        hour = time.localtime(now_ms / 1000).tm_hour
        hours = {h.strip() for h in self.config.delete_when.split(";") if h.strip()}
        return "*" in hours or any(h.isdigit() and int(h) == hour for h in hours)

    def delete_expired_commit_log(self) -> int:
        """One retention pass over the commit log; returns how many segments were deleted."""
        cfg = self.config
        now = self._clock()
        ratio = self._disk_ratio()
        self._mark_disk_full(ratio)
        force = ratio > cfg.disk_space_clean_forcibly_ratio
        manual = self._manual_requests > 0
        if not (manual or force or ratio > cfg.disk_max_used_space_ratio or self._is_delete_hour(now)):
            return 0
        if manual:
            self._manual_requests -= 1
        reserved_ms = int(cfg.file_reserved_time_hours * 3_600_000)
        mfq = self.commit_log.mfq
        files = mfq.files

        def expired(mf: MappedFile) -> bool:
            if force:
                return True
            index = files.index(mf)
            next_first_ts = self.commit_log.store_timestamp_at(files[index + 1].file_from_offset)
            return next_first_ts >= 0 and next_first_ts + reserved_ms <= now

        deleted = mfq.delete_first_files(expired, cfg.delete_files_batch_max)
        if deleted:
            log.info(
                "commit log segments deleted count=%d min_offset=%d disk_ratio=%.2f forced=%s",
                deleted, mfq.min_offset, ratio, force,
            )
        return deleted

    def check_disk(self) -> None:
        """Measure disk use now and refuse or allow puts accordingly (the store does it at start,
        so that a broker started on a full disk refuses at once, not after the first round)."""
        self._mark_disk_full(self._disk_ratio())

    def _mark_disk_full(self, ratio: float) -> None:
        limit = self.config.disk_space_warning_level_ratio
        self.disk_full = ratio > limit
        if self.disk_full:
            store_dir = os.path.dirname(self.commit_log.mfq.directory)
            self.flags.raise_(Condition.DISK_RATIO, (
                f"disk full: {ratio:.1%} of the file system of {store_dir} is used, above "
                f"disk_space_warning_level_ratio {limit}; sends are refused until space is freed"))
        else:
            self.flags.clear(Condition.DISK_RATIO)

    def clean_queues(self) -> None:
        """Drop consume queue segments and index files below the commit log's minimum offset."""
        min_phy = self.commit_log.min_offset
        for cq in list(self._consume_queues()):
            cq.delete_expired(min_phy, self.config.delete_files_batch_max)
        if self._index_delete_expired is not None:
            self._index_delete_expired(min_phy)
