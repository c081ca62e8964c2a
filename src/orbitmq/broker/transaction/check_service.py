"""TransactionCheckService: asks producers about half messages nobody resolved.

Every ``transaction_check_interval_ms`` it walks the half queue from its progress up to the end
the queue had when the round began (copies it re-stores during the round wait for the next one):

- a copy of a transaction that is no longer pending is passed over;
- a copy younger than ``transaction_timeout_ms`` stops the round: the ones after it are younger
  still (age counts from the producer's born time, as RocketMQ, or from the store time when the
  producer's clock runs ahead);
- a copy older than that but still within its CHECK_IMMUNITY_TIME_IN_SECONDS is re-stored with the
  same count, so that it does not hold the round up;
- a copy checked ``transaction_check_max`` times is moved to TRANS_CHECK_MAX_TIME_TOPIC (never
  delivered, still queryable) and logged;
- any other copy is re-stored at the end of the half queue with TRANSACTION_CHECK_TIMES + 1 and
  CHECK_TRANSACTION_STATE is sent (oneway) for the new copy to a live connection of its producer
  group. The count is in the stored copy, so a restart neither forgets nor repeats it.

The progress is committed as the consumer offset of CID_SYS_RMQ_TRANS on the half queue after each
round (and persisted with the other offsets), so a restarted broker goes on where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import itertools
import logging

from orbitmq.broker.transaction.batch import is_batch
from orbitmq.broker.transaction.half_store import check_times_of, origin_of
from orbitmq.broker.transaction.service import TransactionService
from orbitmq.broker.transaction.state import HalfState
from orbitmq.errors import ConnectionClosedError
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.extension_headers import CheckTransactionBatchStateRequestHeader
from orbitmq.protocol.headers import CheckTransactionStateRequestHeader
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.store.status import PutMessageStatus

__all__ = ["TransactionCheckService", "CheckRound", "ROUND_MESSAGES_MAX"]

log = logging.getLogger(__name__)

ROUND_MESSAGES_MAX = 100_000  # half queue entries one round walks at most
_YIELD_EVERY = 256


class _Step(enum.Enum):
    NEXT = "next"  # this copy is dealt with: move on
    STOP = "stop"  # end the round here (a young copy, or the store refused a write)


@dataclasses.dataclass
class CheckRound:
    """What one round did (for logs and tests)."""

    scanned: int = 0
    checked: int = 0
    unsent: int = 0  # checks counted without a live producer to ask
    discarded: int = 0
    postponed: int = 0  # immune copies pushed back


class TransactionCheckService:
    """The periodic check task on the broker's event loop."""

    def __init__(self, service: TransactionService) -> None:
        self.service = service
        self.config = service.config
        self._task: asyncio.Task[None] | None = None
        self._round_robin = itertools.count()
        self.rounds = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        interval_s = self.config.transaction_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                done = await self.check_once()
            except Exception:
                log.exception("transaction check round failed")
                continue
            if done.checked or done.discarded:
                log.info("transaction check round scanned=%d checked=%d unsent=%d discarded=%d "
                         "postponed=%d progress=%d", done.scanned, done.checked, done.unsent,
                         done.discarded, done.postponed, self.service.progress)

    async def check_once(self) -> CheckRound:
        """One round over the half queue (see the module docstring)."""
        svc = self.service
        done = CheckRound()
        end = min(svc.half.half_bounds()[1], svc.progress + ROUND_MESSAGES_MAX)
        now = svc.store.clock()
        while svc.progress < end:
            if done.scanned and done.scanned % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
            done.scanned += 1
            # Most copies a round passes belong to settled transactions: their properties say
            # which, and their bodies (a batch's: up to 4 MiB) are not read.
            head = svc.half.peek_half(svc.progress)
            if head is not None and svc.table.state_of(origin_of(head)) is HalfState.PENDING:
                half = svc.half.read_at(head.physical_offset, head.total_size)
                if half is not None and self._step(half, now, done) is _Step.STOP:
                    break
            svc.progress += 1
        svc.save_progress()
        self.rounds += 1
        await svc.refresh_floor()
        return done

    def _step(self, half: MessageExt, now_ms: int, done: CheckRound) -> _Step:
        svc = self.service
        if svc.state_of(half) is not HalfState.PENDING:
            return _Step.NEXT
        age_ms = now_ms - min(half.born_timestamp, half.store_timestamp)
        if age_ms < self.config.transaction_timeout_ms:
            return _Step.STOP
        times = check_times_of(half)
        if age_ms < _immunity_ms(half):
            if self._restore(half, times) is None:
                return _Step.STOP
            done.postponed += 1
            return _Step.NEXT
        if times >= self.config.transaction_check_max:
            return self._discard(half, times, done)
        copy = self._restore(half, times + 1)
        if copy is None:
            return _Step.STOP
        done.checked += 1
        if not self._send_check(copy):
            done.unsent += 1
        return _Step.NEXT

    def _restore(self, half: MessageExt, times: int) -> MessageExt | None:
        """Append a copy of ``half`` with check count ``times``; the copy as stored."""
        svc = self.service
        result = svc.put(svc.half.renewed(half, times))
        if result.status is not PutMessageStatus.PUT_OK or result.append is None:
            log.warning("half message not re-stored (%s): the round stops here", result.status.value)
            return None
        return svc.half.read_at(result.append.wrote_offset)

    def _discard(self, half: MessageExt, times: int, done: CheckRound) -> _Step:
        svc = self.service
        result = svc.settle(half, HalfState.DISCARDED)
        if result is not None and result.status is not PutMessageStatus.PUT_OK:
            return _Step.STOP
        done.discarded += 1
        log.warning("transaction discarded after %d checks: moved to TRANS_CHECK_MAX_TIME_TOPIC "
                    "topic=%s msg=%s group=%s origin=%d", times,
                    half.properties.get(PropertyKey.REAL_TOPIC), half.msg_id,
                    half.properties.get(PropertyKey.PGROUP), origin_of(half))
        return _Step.NEXT

    def _send_check(self, copy: MessageExt) -> bool:
        """CHECK_TRANSACTION_STATE for ``copy`` to one live producer of its group; False when
        there is none (the check still counts, as in RocketMQ: the number of checks is bounded)."""
        svc = self.service
        group = copy.properties.get(PropertyKey.PGROUP, "")
        conns = svc.ctx.clients.producer_connections(group)
        if not conns:
            log.info("no live producer of group %s to check transaction msg=%s", group, copy.msg_id)
            return False
        conn = conns[next(self._round_robin) % len(conns)]
        cmd = RemotingCommand.request(*_check_request(copy), body=svc.half.for_producer(copy),
                                      oneway=True)
        try:
            conn.invoke_oneway(cmd)
        except ConnectionClosedError:
            log.info("producer connection closed before a check peer=%s", conn.peer)
            return False
        log.debug("transaction check sent msg=%s times=%s peer=%s", copy.msg_id,
                  copy.properties.get(PropertyKey.TRANSACTION_CHECK_TIMES), conn.peer)
        return True


def _check_request(copy: MessageExt) -> tuple[int, dict[str, str]]:
    """The code and header of the check of ``copy``: a batch is checked as a unit with OrbitMQ's
    CHECK_TRANSACTION_BATCH_STATE, so that a RocketMQ producer never sees one."""
    if is_batch(copy):
        return OrbitMQRequestCode.CHECK_TRANSACTION_BATCH_STATE, CheckTransactionBatchStateRequestHeader(
            tran_state_table_offset=copy.queue_offset, commit_log_offset=copy.commit_log_offset,
            transaction_id=copy.uniq_key or copy.offset_msg_id, offset_msg_id=copy.offset_msg_id,
            check_times=check_times_of(copy)).to_ext_fields()
    return RequestCode.CHECK_TRANSACTION_STATE, CheckTransactionStateRequestHeader(
        tran_state_table_offset=copy.queue_offset,
        commit_log_offset=copy.commit_log_offset,
        msg_id=copy.uniq_key or copy.offset_msg_id,
        transaction_id=copy.uniq_key,
        offset_msg_id=copy.offset_msg_id,
    ).to_ext_fields()


def _immunity_ms(half: MessageExt) -> int:
    """CHECK_IMMUNITY_TIME_IN_SECONDS in ms (0 when absent or malformed)."""
    raw = half.properties.get(PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS, "")
    return int(raw) * 1000 if raw.isdigit() else 0
