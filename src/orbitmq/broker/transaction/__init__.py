"""Transactional messages on the broker: half and op messages, END_TRANSACTION, the check service."""

from orbitmq.broker.transaction.service import CHECK_GROUP, TransactionService
from orbitmq.broker.transaction.state import HalfState

__all__ = ["TransactionService", "HalfState", "CHECK_GROUP"]
