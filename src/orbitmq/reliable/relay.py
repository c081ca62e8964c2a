"""The outbox relay: sends committed outbox rows to the brokers and marks them sent.

One round (:meth:`OutboxRelay.run_once`):

1. *claim* (one short transaction): due rows in id order whose earlier rows of the same key are
   all sent or claimed in this round; each claimed for ``lease`` seconds under this relay's name
   (PostgreSQL: ``FOR UPDATE SKIP LOCKED`` keeps concurrent claimers apart; SQLite: the claim
   runs in ``BEGIN IMMEDIATE``, one writer at a time);
2. *send*: rows of different keys concurrently, rows of one key one after the other, each key on
   one queue (``select_by_hash``); a failure stops its key for this round;
3. *mark* (one short transaction): sent rows SENT with their message id, failed rows rescheduled
   with exponential backoff, untried rows released.

No transaction stays open while sending, so a slow broker never holds database locks. A relay
killed between 2 and 3 leaves its claims to expire: the rows are sent again (at-least-once; the
consumer side deduplicates, see :mod:`orbitmq.reliable.idempotent`). A round stops sending at half
its lease, so a claim never expires under a live relay and no row is ever sent twice at once.

With ``transactional=True`` each row goes as a transactional message whose local transaction is
"mark this row sent (if still ours)": the broker delivers it only once the mark committed, and asks
:class:`OutboxTransactionListener` (answered from the table) when the relay died in between. A crash
then costs no duplicate, at the price of one transaction per row.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

from orbitmq.client import (
    LocalTransactionState,
    Producer,
    TransactionListener,
    TransactionProducer,
    select_by_hash,
    transaction_id,
)
from orbitmq.errors import ClientError
from orbitmq.protocol.message import Message, MessageExt
from orbitmq.reliable.db import Database
from orbitmq.reliable.outbox import OUTBOX_ID_PROPERTY, Outbox, OutboxRow, OutboxStatus
from orbitmq.security.signature import Credentials

__all__ = ["RelayConfig", "OutboxRelay", "AsyncOutboxRelay", "OutboxTransactionListener",
           "DEFAULT_RELAY_GROUP"]

log = logging.getLogger(__name__)

DEFAULT_RELAY_GROUP = "orbitmq-outbox-relay"


@dataclasses.dataclass(frozen=True)
class RelayConfig:
    """How a relay works; times in seconds.

    Attributes:
        batch_size_max: rows claimed per round.
        poll_interval: idle wait between rounds that found nothing (``wake()`` cuts it short).
        lease: how long a claim holds; a round sends for at most half of it.
        backoff_base, backoff_max: the wait after the n-th failed send of a row is
            ``backoff_base * 2**(n-1)``, at most ``backoff_max``.
        max_attempts: after this many failed sends a row is FAILED (and holds back its key) until
            ``orbitmq outbox retry``; None: retry for ever.
        send_timeout: the wait for one send's receipt (keep the producer's own send timeout
            below it); ``lease`` must be at least twice as long.
        error_pause: the wait after a round failed on the database itself.
    """

    batch_size_max: int = 100
    poll_interval: float = 0.5
    lease: float = 30.0
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    max_attempts: int | None = None
    send_timeout: float = 10.0
    error_pause: float = 1.0

    def __post_init__(self) -> None:
        if self.batch_size_max < 1 or self.lease <= 0 or self.poll_interval <= 0:
            raise ClientError("batch_size_max >= 1, lease > 0 and poll_interval > 0 are required")
        if self.backoff_base <= 0 or self.backoff_max < self.backoff_base:
            raise ClientError("need 0 < backoff_base <= backoff_max")
        if self.lease < 2 * self.send_timeout:
            raise ClientError("lease must be at least twice send_timeout: a claim must outlive "
                              "the sends of its round")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ClientError("max_attempts must be >= 1 (or None: never give up)")


def _owner_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class OutboxTransactionListener(TransactionListener):
    """Runs and answers for transactional relay sends, from the outbox table.

    The local transaction marks the row sent with the transaction id, only while the row is still
    claimed by the sending relay. A check answers COMMIT when the row was marked with that very
    id, ROLLBACK when it was sent by another transaction (or no longer exists), and UNKNOWN while
    it is unsent (its relay may still be at it; if that relay died, the row is sent again under a
    new id and this check then answers ROLLBACK).
    """

    def __init__(self, database: Database, outbox: Outbox) -> None:
        self.database = database
        self.outbox = outbox

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        assert isinstance(arg, tuple), "the relay passes (row, owner)"
        row, owner = arg
        txid = transaction_id(msg) or ""
        with self.database.transaction() as handle:
            changed = self.outbox.mark_sent(handle, owner, [(row.id, txid)])
        return LocalTransactionState.COMMIT if changed == 1 else LocalTransactionState.ROLLBACK

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        raw_id = msg.properties.get(OUTBOX_ID_PROPERTY)
        if raw_id is None or not raw_id.isdigit():
            log.warning("transaction check for a message without %s: ROLLBACK", OUTBOX_ID_PROPERTY)
            return LocalTransactionState.ROLLBACK
        row = self.outbox.get(self.database.handle(), int(raw_id))
        txid = msg.uniq_key or msg.msg_id
        if row is None:
            return LocalTransactionState.ROLLBACK
        if row.status is OutboxStatus.SENT:
            return (LocalTransactionState.COMMIT if row.msg_id == txid
                    else LocalTransactionState.ROLLBACK)
        return LocalTransactionState.UNKNOWN


class OutboxRelay:
    """Sends an outbox table's rows from a background thread (or call :meth:`run_once` yourself).

    Args:
        database: a :class:`Database` or its URL (``sqlite:///app.db``, ``postgresql://...``).
        producer: a started Producer to send with (you own it), or None: the relay starts one
            of its own from ``namesrv`` and ``group``.
        namesrv, group: for the relay's own producer.
        transactional: send through a TransactionProducer (see the module docstring).
        outbox: the table (default ``orbitmq_outbox``).
        config: see :class:`RelayConfig`.
        credentials: what the relay's own producer signs its requests with
            (:class:`orbitmq.Credentials`: a user allowed Pub on the outbox's topics), for
            servers with authentication on; a ``producer`` you pass carries its own.
        producer_options: more options for the relay's own producer.
    """

    def __init__(self, database: Database | str, producer: Producer | None = None, *,
                 namesrv: str | None = None, group: str = DEFAULT_RELAY_GROUP,
                 transactional: bool = False, outbox: Outbox | None = None,
                 config: RelayConfig | None = None, credentials: Credentials | None = None,
                 **producer_options: Any) -> None:
        self.database = Database(database) if isinstance(database, str) else database
        self._own_database = isinstance(database, str)
        self.outbox = outbox or Outbox()
        self.config = config or RelayConfig()
        self.transactional = transactional
        self.owner = _owner_name()
        self._producer = producer
        self._own_producer = producer is None
        if producer is not None and credentials is not None:
            raise ClientError("credentials are for the relay's own producer: give them to the "
                              "Producer you pass instead")
        if credentials is not None:
            producer_options["credentials"] = credentials
        self._producer_args = (group, namesrv, producer_options)
        if transactional and producer is not None and not isinstance(producer, TransactionProducer):
            raise ClientError("transactional=True needs a TransactionProducer")
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent_total = 0
        self.failed_total = 0

    # -- lifecycle -------------------------------------------------------------------------------
    def setup(self) -> OutboxRelay:
        """Create the table if missing and start the relay's own producer (no thread)."""
        with self.database.transaction() as handle:
            self.outbox.create_table(handle)
        if self._producer is None:
            group, namesrv, options = self._producer_args
            if self.transactional:
                listener = OutboxTransactionListener(self.database, self.outbox)
                self._producer = TransactionProducer(group, namesrv, listener=listener, **options)
            else:
                self._producer = Producer(group, namesrv, **options)
            self._producer.start()
        return self

    def start(self) -> OutboxRelay:
        """:meth:`setup`, then send in a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return self
        self.setup()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="orbitmq-outbox-relay", daemon=True)
        self._thread.start()
        return self

    def wake(self) -> None:
        """Start the next round now (call it after committing rows, to skip the idle wait)."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the current round, stop the thread, shut what the relay started."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        if self._own_producer and self._producer is not None:
            self._producer.shutdown()
            self._producer = None
        if self._own_database:
            self.database.close()

    def __enter__(self) -> OutboxRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                sent = self.run_once()
            except Exception as e:  # the database went away: reconnect after a pause
                log.warning("outbox relay round failed owner=%s: %s", self.owner, _describe(e))
                self.database.discard()
                self._stop.wait(self.config.error_pause)
                continue
            if sent == 0:
                self._wake.wait(self.config.poll_interval)
                self._wake.clear()

    # -- one round -------------------------------------------------------------------------------
    def run_once(self) -> int:
        """Claim, send and mark one batch; returns the number of rows sent.

        Raises:
            ClientError: the relay is not set up.
            Exception: the database's errors (rows stay claimed until their lease ends).
        """
        if self._producer is None:
            raise ClientError("relay not set up: call setup() or start()")
        cfg = self.config
        with self.database.transaction() as handle:
            rows = self.outbox.claim(handle, self.owner, cfg.batch_size_max, int(cfg.lease * 1000))
        if not rows:
            return 0
        deadline = time.monotonic() + cfg.lease / 2
        if self.transactional:
            sent, failed, untried = self._send_transactional(rows, deadline)
        else:
            sent, failed, untried = self._send_plain(rows, deadline)
        with self.database.transaction() as handle:
            if not self.transactional:
                self.outbox.mark_sent(handle, self.owner, sent)
            self.outbox.mark_failed(handle, self.owner, failed, base_ms=int(cfg.backoff_base * 1000),
                                    max_ms=int(cfg.backoff_max * 1000), max_attempts=cfg.max_attempts)
            self.outbox.release(handle, self.owner, untried)
        self.sent_total += len(sent)
        self.failed_total += len(failed)
        if failed:
            log.info("outbox relay owner=%s sent=%d failed=%d first error: %s", self.owner,
                     len(sent), len(failed), failed[0][1])
        return len(sent)

    def _send_plain(self, rows: list[OutboxRow], deadline: float
                    ) -> tuple[list[tuple[int, str]], list[tuple[OutboxRow, str]], list[int]]:
        """Send in waves: the first row of every key at once, then the second, ..."""
        assert self._producer is not None
        lanes = _lanes(rows)
        sent: list[tuple[int, str]] = []
        failed: list[tuple[OutboxRow, str]] = []
        while lanes and time.monotonic() < deadline:
            futures = [(lane, self._send_async(lane[0])) for lane in lanes]
            next_lanes = []
            for lane, future in futures:
                try:
                    result = future.result(timeout=self.config.send_timeout)
                except Exception as e:  # every failure is recorded on the row
                    failed.append((lane[0], _describe(e)))
                    continue  # the rest of this key waits for the next round
                sent.append((lane[0].id, result.msg_id))
                if len(lane) > 1:
                    next_lanes.append(lane[1:])
            lanes = next_lanes
        done = {i for i, _ in sent} | {r.id for r, _ in failed}
        return sent, failed, [r.id for r in rows if r.id not in done]

    def _send_async(self, row: OutboxRow) -> concurrent.futures.Future[Any]:
        assert self._producer is not None
        try:
            if row.order_key is None:
                return self._producer.send_async(row.message())
            return self._producer.send_async(row.message(), select_by_hash, row.order_key)
        except Exception as e:  # a message the producer refuses outright
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_exception(e)
            return future

    def _send_transactional(self, rows: list[OutboxRow], deadline: float
                            ) -> tuple[list[tuple[int, str]], list[tuple[OutboxRow, str]], list[int]]:
        """One transaction per row, in id order; a failure stops its key for this round."""
        producer = self._producer
        assert isinstance(producer, TransactionProducer)
        sent: list[tuple[int, str]] = []
        failed: list[tuple[OutboxRow, str]] = []
        untried: list[int] = []
        stopped: set[str] = set()
        for row in rows:
            if time.monotonic() >= deadline or (row.order_key is not None and row.order_key in stopped):
                untried.append(row.id)
                continue
            try:
                result = producer.send_in_transaction(row.message(), arg=(row, self.owner))
                error = None if result.local_state is LocalTransactionState.COMMIT else (
                    f"local transaction answered {result.local_state.name}")
            except Exception as e:  # recorded on the row
                error = _describe(e)
            if error is None:
                sent.append((row.id, result.msg_id))
            else:
                failed.append((row, error))
                if row.order_key is not None:
                    stopped.add(row.order_key)
        return sent, failed, untried


def _lanes(rows: list[OutboxRow]) -> list[list[OutboxRow]]:
    """Rows grouped by order key (each keyless row alone), each group in id order."""
    by_key: dict[str, list[OutboxRow]] = {}
    lanes: list[list[OutboxRow]] = []
    for row in rows:
        if row.order_key is None:
            lanes.append([row])
        elif row.order_key in by_key:
            by_key[row.order_key].append(row)
        else:
            by_key[row.order_key] = lane = [row]
            lanes.append(lane)
    return lanes


class AsyncOutboxRelay:
    """The relay as an asyncio task: rounds run on a worker thread (the database drivers block),
    idle waits on the event loop. Takes the arguments of :class:`OutboxRelay`."""

    def __init__(self, database: Database | str, producer: Producer | None = None,
                 **options: Any) -> None:
        self.relay = OutboxRelay(database, producer, **options)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="orbitmq-relay")
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    async def start(self) -> AsyncOutboxRelay:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.relay.setup)
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._loop(), name="orbitmq-outbox-relay")
        return self

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.relay.config
        assert self._wake is not None
        while True:
            try:
                sent = await loop.run_in_executor(self._executor, self.relay.run_once)
            except Exception as e:  # the database went away: retry after a pause
                log.warning("outbox relay round failed: %s", _describe(e))
                await loop.run_in_executor(self._executor, self.relay.database.discard)
                await asyncio.sleep(cfg.error_pause)
                continue
            if sent == 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), cfg.poll_interval)
                except TimeoutError:
                    pass
                self._wake.clear()

    async def stop(self) -> None:
        """Cancel the task (a round under way finishes on its thread), then shut down."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.relay.stop)
        self._executor.shutdown(wait=True)

    async def __aenter__(self) -> AsyncOutboxRelay:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
