"""The broker: store, topic and offset tables, request processors, long polling, registration."""

from orbitmq.broker.controller import BrokerController

__all__ = ["BrokerController"]
