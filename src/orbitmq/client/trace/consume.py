"""A push consumer's trace records: one SubBefore record per message as a listener call starts
(its id, reconsume times, keys) and one SubAfter per message when it ends (the call's time divided
by its messages, whether it succeeded and how, as RocketMQ's ConsumeReturnType), tied together by
one request id. A message whose TRACE_ON property is ``false`` is not traced, as in RocketMQ.
"""

from __future__ import annotations

import time

from orbitmq.client.consumer.consume_types import ConsumeContext, ConsumeResult, ListenerRunner
from orbitmq.client.trace.dispatcher import TraceDispatcher
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.protocol.msgid import UniqIdGenerator
from orbitmq.protocol.trace_codec import (
    DEFAULT_REGION_ID,
    ConsumeReturnType,
    TraceRecord,
    TraceType,
)

__all__ = ["TracedListenerRunner"]

_RETURN_TYPES = {"SUCCESS": ConsumeReturnType.SUCCESS, "EXCEPTION": ConsumeReturnType.EXCEPTION,
                 "RETURNNULL": ConsumeReturnType.RETURNNULL, "FAILED": ConsumeReturnType.FAILED}


class TracedListenerRunner(ListenerRunner):
    """A ListenerRunner that writes SubBefore and SubAfter records around each listener call."""

    def __init__(self, *args: object, dispatcher: TraceDispatcher, ids: UniqIdGenerator,
                 **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.dispatcher = dispatcher
        self._ids = ids

    async def run(self, messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        traced = [m for m in messages if m.properties.get(PropertyKey.TRACE_ON) != "false"]
        if not traced:
            return await super().run(messages, context)
        request_id = self._ids.next()
        started = time.time()
        started_ms = int(started * 1000)
        group = context.group
        append = self.dispatcher.append
        for msg in traced:
            append(TraceRecord(
                TraceType.SUB_BEFORE, timestamp_ms=started_ms,
                region_id=msg.properties.get(PropertyKey.MSG_REGION) or DEFAULT_REGION_ID,
                group=group, request_id=request_id, msg_id=msg.msg_id,
                retry_times=msg.reconsume_times, keys=msg.properties.get(PropertyKey.KEYS)))
        result, how = await self.run_coded(messages, context)
        cost = max(0, int((time.time() - started) * 1000) // len(messages))
        ok = result is ConsumeResult.SUCCESS
        code = _RETURN_TYPES.get(how, ConsumeReturnType.FAILED)
        for msg in traced:
            append(TraceRecord(
                TraceType.SUB_AFTER, timestamp_ms=started_ms, group=group, request_id=request_id,
                msg_id=msg.msg_id, cost_time_ms=cost, success=ok,
                keys=msg.properties.get(PropertyKey.KEYS), context_code=code))
        return result
