"""The POP in-flight log: ``STORE/pop/inflight.log``, one line per change of the POP state.

Lines (tab-separated; group and topic names never hold a tab):

    N  group  topic  queue  offset                               the cursor moved
    S  group  topic  queue  offset  deadline  attempt  gen  renew_until  owner   handed out / changed
    A  group  topic  queue  offset                               acked or dead-lettered

Replaying the lines in order rebuilds the state (inflight.PopState.apply); a torn last line
(no newline, or fields that do not parse) ends the replay. Writes are plain appends, made when
a request changed the state (one write per request): a killed broker process loses nothing
written. Durability against a power cut follows the store's flush mode: under SYNC_FLUSH an
ack is answered only after the log is synced (one sync shared by the acks of one round,
:meth:`PopLog.synced`); under ASYNC_FLUSH the log is synced every ``flush_interval_ms``, like
the commit log.

Once the file passes ``compact_bytes`` it is rewritten from the state (a snapshot: the cursors
and the messages in flight) into a temporary file, synced and renamed over the log, so its
size stays bounded by the messages in flight.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Iterator

from orbitmq.broker.pop.inflight import Change, Inflight
from orbitmq.errors import BrokerError, StoreError
from orbitmq.files import replace_file
from orbitmq.protocol.codes import ResponseCode
from orbitmq.store.file_mode import file_mode_in, make_dirs

__all__ = ["PopLog", "encode_change", "decode_line"]

log = logging.getLogger(__name__)

LINE_MAX = 4096  # bytes of one line; longer ones are not ours


def encode_change(c: Change) -> str:
    if c.kind == "S" and c.entry is not None:
        e = c.entry
        return (f"S\t{c.group}\t{c.topic}\t{c.queue_id}\t{c.offset}\t{e.deadline_ms}\t{e.attempt}"
                f"\t{e.gen}\t{e.renew_until_ms}\t{e.owner}\n")
    return f"{c.kind}\t{c.group}\t{c.topic}\t{c.queue_id}\t{c.offset}\n"


def decode_line(line: str) -> Change | None:
    """One line back as a change; None when it is torn or not ours."""
    parts = line.split("\t")
    try:
        if parts[0] in ("N", "A") and len(parts) == 5:
            return Change(parts[0], parts[1], parts[2], int(parts[3]), int(parts[4]))
        if parts[0] == "S" and len(parts) == 10:
            entry = Inflight(int(parts[5]), int(parts[6]), int(parts[7]), int(parts[8]), parts[9])
            return Change("S", parts[1], parts[2], int(parts[3]), int(parts[4]), entry)
    except ValueError:
        return None
    return None


class PopLog:
    """The append-only log of the POP state (module docstring).

    Args:
        directory: ``STORE/pop``.
        sync_each_ack: SYNC_FLUSH: acks wait for a sync of the log.
        compact_bytes: the size past which the log is rewritten from the state.
    """

    def __init__(self, directory: str, *, sync_each_ack: bool, compact_bytes: int) -> None:
        self.path = os.path.join(directory, "inflight.log")
        self.directory = directory
        self.sync_each_ack = sync_each_ack
        self.compact_bytes = compact_bytes
        self._fd = -1
        self.size = 0
        self._pending: list[str] = []
        self._sync_future: asyncio.Future[None] | None = None
        self.compactions = 0

    def open(self) -> Iterator[Change]:
        """Open the log and yield its changes (a torn tail is cut off)."""
        make_dirs(self.directory)
        good = 0
        changes: list[Change] = []
        try:
            with open(self.path, "rb") as f:
                for raw in f:
                    if not raw.endswith(b"\n") or len(raw) > LINE_MAX:
                        break
                    change = decode_line(raw[:-1].decode("utf-8", "replace"))
                    if change is None:
                        break
                    changes.append(change)
                    good += len(raw)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StoreError(f"the POP log {self.path} cannot be read: {e}") from None
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, file_mode_in(self.directory))
        if os.fstat(self._fd).st_size != good:
            log.warning("POP log %s: torn tail cut at %d bytes", self.path, good)
            os.ftruncate(self._fd, good)
        self.size = good
        yield from changes

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            try:
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
        self._fd = -1

    def add(self, change: Change) -> None:
        """Remember a change; written by the next :meth:`flush` (end of the request)."""
        self._pending.append(encode_change(change))

    def flush(self) -> None:
        """Write the remembered changes in one append, at the end of the last whole line.

        A failed write (a full disk) raises and keeps the changes remembered, for the next
        flush to write first, and cuts the file back to its last whole line: the log never
        holds a later change without the earlier ones (a cursor moved past messages whose
        hand-out was not logged would lose them for the group at the next start), nor a torn
        line followed by good ones (the replay stops at the first torn line).
        """
        if not self._pending or self._fd < 0:
            return
        data = "".join(self._pending).encode()
        done = 0
        try:
            while done < len(data):
                done += os.pwrite(self._fd, data[done:], self.size + done)
        except OSError as e:
            if done:
                try:
                    os.ftruncate(self._fd, self.size)
                except OSError as cut:  # the next flush writes over it from ``size`` all the same
                    log.error("POP log %s: cannot cut a torn append: %s", self.path, cut)
            raise self._unsaved("written", e) from None
        self._pending.clear()
        self.size += len(data)

    def _unsaved(self, what: str, e: OSError) -> BrokerError:
        """The refusal a request meets when the log cannot be ``what`` (a full or failing
        disk); said loudly here, where the path is known."""
        log.error("POP log %s cannot be %s: %s", self.path, what, e)
        return BrokerError(ResponseCode.SERVICE_NOT_AVAILABLE,
                           f"the POP state cannot be {what} on the broker: {e.strerror or e}")

    def sync(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise self._unsaved("synced", e) from None

    async def synced(self) -> None:
        """Wait until what was written so far is synced (SYNC_FLUSH acks); acks of one loop
        round share one sync."""
        self.flush()
        if not self.sync_each_ack:
            return
        fut = self._sync_future
        if fut is None or fut.done():
            loop = asyncio.get_running_loop()
            fut = self._sync_future = loop.create_future()
            loop.call_soon(self._run_sync, fut)
        await asyncio.shield(fut)

    def _run_sync(self, fut: asyncio.Future[None]) -> None:
        async def run() -> None:
            try:
                await asyncio.to_thread(self.sync)
                fut.set_result(None)
            except BrokerError as e:
                fut.set_exception(e)
        asyncio.ensure_future(run())
        self._sync_future = None  # writes after this point wait for the next sync

    def compact(self, snapshot: Iterable[Change]) -> None:
        """Rewrite the log from the state (call with nothing pending)."""
        self.flush()
        data = "".join(encode_change(c) for c in snapshot).encode()
        replace_file(self.path, data, file_mode_in(self.directory))
        old, self._fd = self._fd, os.open(self.path, os.O_RDWR)
        os.close(old)
        self.size = len(data)
        self.compactions += 1
