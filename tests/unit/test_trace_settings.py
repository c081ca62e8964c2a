"""The broker's message trace settings: RocketMQ's names and defaults, the topic name checked."""

from __future__ import annotations

import pytest

from orbitmq.config import BrokerConfig
from orbitmq.config.fields import ConfigError


def test_defaults_are_rocketmqs() -> None:
    cfg = BrokerConfig()
    assert (cfg.trace_topic_enable, cfg.msg_trace_topic_name) == (False, "RMQ_SYS_TRACE_TOPIC")


@pytest.mark.parametrize("name", ["", "with space", "x" * 128])
def test_a_bad_trace_topic_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="msg_trace_topic_name"):
        BrokerConfig(msg_trace_topic_name=name)
