"""Failover (controller mode, docs/failover.md): masters elected through etcd, old masters fenced,
logs cut by epoch. rules.py holds the pure rules; service.py runs them in the broker."""

from orbitmq.broker.failover.service import FailoverService

__all__ = ["FailoverService"]
