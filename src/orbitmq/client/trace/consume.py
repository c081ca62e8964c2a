"""A push consumer's trace records: one SubBefore record per message as a listener call starts
(its id, reconsume times, keys) and one SubAfter per message when it ends (the call's time divided
by its messages, whether it succeeded and how, as RocketMQ's ConsumeReturnType), tied together by
one request id. A message whose TRACE_ON property is ``false`` is not traced, as in RocketMQ.
"""

from __future__ import annotations

import time

from orbitmq.client.consumer.consume_types import ConsumeContext, ConsumeResult, ListenerRunner
from orbitmq.client.namespace import unwrap
from orbitmq.client.trace.dispatcher import TraceDispatcher
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.protocol.msgid import UniqIdGenerator
from orbitmq.protocol.trace_codec import DEFAULT_REGION_ID, ConsumeReturnType

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
        """The listener call between its SubBefore and SubAfter records, written straight as
        TraceDataEncoder's text (the fields are safe: ids, keys and the region come from stored
        properties, which cannot hold a separator, and the group is a checked name)."""
        traced = [m for m in messages if m.properties.get(PropertyKey.TRACE_ON) != "false"]
        if not traced:
            return await super().run(messages, context)
        request_id = self._ids.next()
        started = time.time()
        started_ms = int(started * 1000)
        group = unwrap(context.group, self._namespace)  # as RocketMQ's hooks: no namespace
        append = self.dispatcher.append_text
        for msg in traced:
            props = msg.properties
            region = props.get(PropertyKey.MSG_REGION) or DEFAULT_REGION_ID
            keys = props.get(PropertyKey.KEYS)
            append(f"SubBefore\x01{started_ms}\x01{region}\x01{group}\x01{request_id}\x01"
                   f"{msg.msg_id}\x01{msg.reconsume_times}\x01{keys or 'null'}\x02",
                   msg.msg_id, keys)
        result, how = await self.run_coded(messages, context)
        ended = time.time()
        cost = max(0, int((ended - started) * 1000) // len(messages))
        ok = "true" if result is ConsumeResult.SUCCESS else "false"
        code = int(_RETURN_TYPES.get(how, ConsumeReturnType.FAILED))
        ended_ms = int(ended * 1000)  # a SubAfter's time is its own (RocketMQ's new context)
        for msg in traced:
            keys = msg.properties.get(PropertyKey.KEYS)
            append(f"SubAfter\x01{request_id}\x01{msg.msg_id}\x01{cost}\x01{ok}\x01"
                   f"{keys or 'null'}\x01{code}\x01{ended_ms}\x01{group}\x02", msg.msg_id, keys)
        return result
