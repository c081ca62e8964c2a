"""Transactional messages on the broker: half and op messages, END_TRANSACTION, the check service."""

from orbitmq.broker.transaction.batch_processor import TransactionBatchProcessor
from orbitmq.broker.transaction.check_service import TransactionCheckService
from orbitmq.broker.transaction.end_transaction_processor import EndTransactionProcessor
from orbitmq.broker.transaction.service import CHECK_GROUP, TransactionService
from orbitmq.broker.transaction.state import HalfState

__all__ = ["TransactionService", "TransactionCheckService", "EndTransactionProcessor", "HalfState",
           "CHECK_GROUP", "TransactionBatchProcessor"]
