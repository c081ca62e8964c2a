"""GET_BROKER_CONFIG (26) and UPDATE_BROKER_CONFIG (25): a broker's settings as RocketMQ's
tools read and change them (see :mod:`orbitmq.broker.runtime_config` for the names, the
runtime-changeable settings and where changes persist).

GET_BROKER_CONFIG answers Java properties text (``name=value`` lines, RocketMQ's names and
units) with the response header ``version``, the config's DataVersion as JSON
(``{"timestamp": ms, "counter": n}``; the counter grows with every update).

UPDATE_BROKER_CONFIG takes properties text in the body. Refused with INVALID_PARAMETER and a
remark naming the setting: a body that is not properties text, an unknown name, a setting that
cannot change while the broker runs, a value out of its range. Nothing is changed then. When
the overlay file cannot be written the answer is SYSTEM_ERROR (the disk failed) and nothing is
changed either. A change of ``brokerPermission`` re-registers with the name servers at once
(each topic registered with the broker's permission, as RocketMQ does), and the answer waits
for that registration (at most REGISTER_WAIT_S), so that the routes say it when the tool
returns; clients follow within a route refresh.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

import orjson

from orbitmq.broker.runtime_config import (
    RUNTIME_FIELDS,
    apply_live,
    changes_from_properties,
    java_properties,
    save_overlay,
)
from orbitmq.config import BrokerConfig, ConfigError
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.admin_headers import GetBrokerConfigResponseHeader
from orbitmq.protocol.bodies import Perm, TopicConfig, TopicConfigSerializeWrapper
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.properties_text import format_properties_text, parse_properties_text
from orbitmq.transport.connection import RemotingConnection

__all__ = ["BrokerConfigProcessor", "permitted_wrapper", "permitted_topic"]

_RW = int(Perm.READ | Perm.WRITE)
REGISTER_WAIT_S = 3.0  # the longest a permission change waits for the name servers

log = logging.getLogger(__name__)


class BrokerConfigProcessor:
    """Reads and changes the running broker's settings.

    Args:
        config: the broker's live config (changed in place by updates).
        permission_changed: called after ``broker_permission`` changed; done when the name
            servers have the broker's new registration.
    """

    def __init__(self, config: BrokerConfig,
                 permission_changed: Callable[[], Awaitable[None]]) -> None:
        self.config = config
        self.permission_changed = permission_changed
        self.version_counter = 0
        self.version_timestamp = int(time.time() * 1000)

    def get_broker_config(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        version = orjson.dumps({"timestamp": self.version_timestamp,
                                "counter": self.version_counter}).decode()
        return cmd.response(ResponseCode.SUCCESS,
                            ext_fields=GetBrokerConfigResponseHeader(version).to_ext_fields(),
                            body=format_properties_text(java_properties(self.config)))

    def update_broker_config(self, cmd: RemotingCommand, conn: RemotingConnection
                             ) -> RemotingCommand | Awaitable[RemotingCommand]:
        try:
            entries = parse_properties_text(cmd.body)
        except RemoteProtocolError as e:
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"bad request: {e}")
        if not entries:
            return cmd.response(ResponseCode.INVALID_PARAMETER, "no setting to change in the body")
        try:
            new = changes_from_properties(self.config, entries)
        except ConfigError as e:
            return cmd.response(ResponseCode.INVALID_PARAMETER, str(e))
        changed = set(_differing(self.config, new))
        if not changed:
            return cmd.response(ResponseCode.SUCCESS)
        try:
            save_overlay(new, changed)
        except OSError as e:
            log.error("cannot save runtime settings: %s", e)
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"cannot save the settings ({e}); nothing was changed")
        applied = apply_live(self.config, new)
        self.version_counter += 1
        self.version_timestamp = int(time.time() * 1000)
        log.info("broker settings changed by %s: %s", conn.peer,
                 ", ".join(f"{p}={entries_value(new, p)}" for p in applied))
        if "broker_permission" in applied:
            return self._after_registration(cmd)
        return cmd.response(ResponseCode.SUCCESS)

    async def _after_registration(self, cmd: RemotingCommand) -> RemotingCommand:
        try:
            await asyncio.wait_for(self.permission_changed(), REGISTER_WAIT_S)
        except TimeoutError:
            log.warning("re-registration after a permission change took over %.0f s",
                        REGISTER_WAIT_S)
        return cmd.response(ResponseCode.SUCCESS)


def permitted_wrapper(wrapper: TopicConfigSerializeWrapper,
                      config: BrokerConfig) -> TopicConfigSerializeWrapper:
    """The topics to register with the name servers: each topic's permission narrowed by the
    broker's (``broker_permission`` 4 registers every topic read-only, so producers leave the
    broker while consumers drain it), as RocketMQ registers them."""
    perm = config.broker_permission
    if perm & _RW == _RW:
        return wrapper
    table = {name: dataclasses.replace(tc, perm=tc.perm & perm)
             for name, tc in wrapper.topic_config_table.items()}
    return TopicConfigSerializeWrapper(table, wrapper.data_version)


def permitted_topic(tc: TopicConfig | None, config: BrokerConfig) -> TopicConfig | None:
    """One topic as permitted_wrapper registers it (for a single-topic registration)."""
    perm = config.broker_permission
    if tc is None or perm & _RW == _RW:
        return tc
    return dataclasses.replace(tc, perm=tc.perm & perm)


def _differing(live: BrokerConfig, new: BrokerConfig) -> list[str]:
    return [p for p in RUNTIME_FIELDS if entries_value(live, p) != entries_value(new, p)]


def entries_value(config: BrokerConfig, path: str) -> object:
    """The value of a dotted setting (``store.x`` for store settings)."""
    if path.startswith("store."):
        return getattr(config.store, path[6:])
    return getattr(config, path)
