"""GET_CONSUMER_RUNNING_INFO (307): a push consumer describing itself to an admin, through a broker.

The broker forwards an admin's request to the consumer's connection; the consumer answers with
this JSON body (RocketMQ's ConsumerRunningInfo, except that ``mqTable`` is a list: Java writes it
as an object keyed by MessageQueue objects, which is not valid JSON)::

    {
      "properties": {"consumerGroup": "g", "clientId": "10.0.0.5@4242#ab12cd34ef56",
                     "messageModel": "CLUSTERING", "consumeType": "CONSUME_PASSIVELY",
                     "consumeOrderly": "false", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                     "consumeThreadNums": "20", "consumeMessageBatchMaxSize": "1",
                     "pullBatchSize": "32", "pullThresholdForQueue": "1000",
                     "pullThresholdSizeForQueue": "100", "consumeConcurrentlyMaxSpan": "2000",
                     "maxReconsumeTimes": "16", "allocateStrategy": "AVG",
                     "startTimestamp": "1700000000000", "rebalanceRounds": "12", ...},
      "subscriptionSet": [{"topic": "T", "subString": "a || b", "tagsSet": ["a", "b"],
                           "codeSet": [97, 98], "subVersion": 1700000000000,
                           "classFilterMode": false, "expressionType": "TAG"}, ...],
      "mqTable": [{"messageQueue": {"topic": "T", "brokerName": "broker-a", "queueId": 0},
                   "processQueueInfo": {"commitOffset": 120, "cachedMsgMinOffset": 121,
                                        "cachedMsgMaxOffset": 152, "cachedMsgCount": 32,
                                        "cachedMsgSizeInMiB": 0, "consumingMsgCount": 0,
                                        "locked": false, "tryUnlockTimes": 0,
                                        "lastLockTimestamp": 0, "droped": false,
                                        "lastPullTimestamp": 1700000000123,
                                        "lastConsumeTimestamp": 1700000000120}}, ...],
      "statusTable": {"pulledTotal": 152, "consumeOKTotal": 120, "consumeFailedTotal": 0,
                      "sentBackTotal": 0, "deadLetteredTotal": 0, "consumeRT": 0.41}
    }

``commitOffset`` is the offset this consumer would commit now (the next message to consume).
Property values are strings, as Java's Properties.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from orbitmq.client.consumer.consume_types import PushConsumerConfig
from orbitmq.client.consumer.offset_store import OffsetStore
from orbitmq.client.consumer.process_queue import ProcessQueue
from orbitmq.protocol.bodies import MessageQueue, SubscriptionData

__all__ = ["build_running_info"]


def build_running_info(
    config: PushConsumerConfig,
    client_id: str,
    strategy_name: str,
    started_ms: int,
    subscriptions: dict[str, SubscriptionData],
    table: dict[MessageQueue, ProcessQueue],
    offsets: OffsetStore,
    status: dict[str, Any],
    rounds: int,
) -> dict[str, Any]:
    """The body described in the module docstring."""
    loop_now = asyncio.get_running_loop().time()
    wall_offset = time.time() - loop_now
    properties = {
        "consumerGroup": config.group,
        "clientId": client_id,
        "messageModel": config.message_model.name,
        "consumeType": "CONSUME_PASSIVELY",
        "consumeOrderly": str(config.orderly).lower(),
        "consumeFromWhere": config.consume_from.where.name,
        "consumeThreadNums": config.consume_thread_nums,
        "consumeMessageBatchMaxSize": config.consume_message_batch_max_size,
        "pullBatchSize": config.pull_batch_size,
        "pullThresholdForQueue": config.pull_threshold_for_queue,
        "pullThresholdSizeForQueue": config.pull_threshold_size_for_queue_mib,
        "consumeConcurrentlyMaxSpan": config.consume_concurrently_max_span,
        "maxReconsumeTimes": config.effective_max_reconsume_times,
        "suspendCurrentQueueTimeMillis": config.suspend_current_queue_time_ms,
        "persistConsumerOffsetInterval": config.persist_consumer_offset_interval_ms,
        "allocateStrategy": strategy_name,
        "startTimestamp": started_ms,
        "rebalanceRounds": rounds,
    }
    mq_table = []
    for mq, pq in sorted(table.items()):
        committed = offsets.read(mq)
        mq_table.append({
            "messageQueue": mq.to_dict(),
            "processQueueInfo": pq.info(committed, loop_now, wall_offset),
        })
    return {
        "properties": {k: str(v) for k, v in properties.items()},
        "subscriptionSet": [s.to_dict() for _, s in sorted(subscriptions.items())],
        "mqTable": mq_table,
        "statusTable": status,
    }
