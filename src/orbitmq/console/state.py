"""What every page handler reaches through its request: the console's settings, its SDK clients,
its guard, its runtime sampler and its templates."""

from __future__ import annotations

import dataclasses

import jinja2
from aiohttp import web

from orbitmq.client.admin import AsyncAdmin
from orbitmq.config import ConsoleConfig
from orbitmq.console.sampler import RuntimeSampler
from orbitmq.console.security import Guard

__all__ = ["ConsoleState", "STATE", "state"]


@dataclasses.dataclass
class ConsoleState:
    """One console's shared parts (one per application)."""

    config: ConsoleConfig
    admin: AsyncAdmin
    guard: Guard
    sampler: RuntimeSampler
    templates: jinja2.Environment


STATE = web.AppKey("orbitmq_console", ConsoleState)


def state(request: web.Request) -> ConsoleState:
    return request.app[STATE]
