"""The order service: each order is a row in SQLite and a message on OrderTopic, both or neither.

It uses transactional messages: the half message is stored first, then the local transaction
inserts the order (a declined payment rolls it back), and the broker delivers the message only if
the insert committed. A broker that did not hear the verdict checks back, and the answer comes from
the database, so a crash between the two steps cannot leave them disagreeing.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from orbitmq import LocalTransactionState, Message, TransactionListener, TransactionProducer

PRODUCTS = ("keyboard", "mouse", "monitor", "headset", "webcam")
PRICES = {"keyboard": 49.0, "mouse": 19.5, "monitor": 189.0, "headset": 79.0, "webcam": 39.9}
ORDER_TOPIC = "OrderTopic"


@dataclass(frozen=True)
class Order:
    order_id: str
    product: str
    quantity: int
    amount: float
    event_ms: int  # when the order was placed (event time of the stats job)
    declined: bool = False

    def body(self) -> bytes:
        return json.dumps({"kind": "order", "order_id": self.order_id, "product": self.product,
                           "quantity": self.quantity, "amount": self.amount,
                           "event_ms": self.event_ms}).encode()


class OrderStore:
    """The service's database (one connection per thread: SQLite's rule)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        with self._conn() as db:
            db.execute("CREATE TABLE IF NOT EXISTS orders (order_id TEXT PRIMARY KEY, product "
                       "TEXT NOT NULL, quantity INTEGER NOT NULL, amount REAL NOT NULL, "
                       "event_ms INTEGER NOT NULL)")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = sqlite3.connect(self.path, timeout=30)
        return conn

    def insert(self, order: Order) -> None:
        with self._conn() as db:
            db.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", (
                order.order_id, order.product, order.quantity, order.amount, order.event_ms))

    def exists(self, order_id: str) -> bool:
        row = self._conn().execute("SELECT 1 FROM orders WHERE order_id = ?", (order_id,)).fetchone()
        return row is not None

    def totals(self) -> dict[tuple[int, str], tuple[float, int]]:
        """(minute start ms, product) -> (revenue, orders): what the stats must add up to."""
        rows = self._conn().execute(
            "SELECT (event_ms / 60000) * 60000, product, ROUND(SUM(amount), 2), COUNT(*) "
            "FROM orders GROUP BY 1, 2").fetchall()
        return {(int(m), p): (float(r), int(c)) for m, p, r, c in rows}


class Checkout(TransactionListener):
    """The local transaction of an order, and the answer to the broker's checks."""

    def __init__(self, store: OrderStore) -> None:
        self.store = store

    def execute_local_transaction(self, msg: Message, order: object) -> LocalTransactionState:
        assert isinstance(order, Order)
        if order.declined:
            return LocalTransactionState.ROLLBACK  # payment declined: no row, no message
        self.store.insert(order)
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg) -> LocalTransactionState:
        order_id = json.loads(msg.body)["order_id"]
        exists = self.store.exists(order_id)
        return LocalTransactionState.COMMIT if exists else LocalTransactionState.ROLLBACK


def make_orders(count: int, start_ms: int, span_ms: int, seed: int = 7) -> list[Order]:
    """``count`` orders spread over ``span_ms`` of event time; about 1 in 12 is declined."""
    rng = random.Random(seed)
    orders = []
    for i in range(count):
        product = rng.choice(PRODUCTS)
        quantity = rng.randint(1, 3)
        orders.append(Order(f"order-{i:06d}", product, quantity, round(PRICES[product] * quantity, 2),
                            start_ms + i * span_ms // max(count, 1), declined=rng.random() < 1 / 12))
    return orders


def place_orders(namesrv: str, store: OrderStore, orders: list[Order], progress: object = None,
                 topic: str = ORDER_TOPIC) -> int:
    """Publish every order in a transaction; returns how many committed."""
    committed = 0
    with TransactionProducer("order-service", namesrv, listener=Checkout(store)) as producer:
        for i, order in enumerate(orders):
            msg = Message(topic, order.body(), tags="order", keys=[order.order_id])
            result = producer.send_in_transaction(msg, arg=order)
            committed += result.local_state is LocalTransactionState.COMMIT
            if callable(progress):
                progress(i + 1, committed)
    return committed


def send_tick(namesrv: str, event_ms: int, topic: str = ORDER_TOPIC) -> None:
    """A message that only moves the stats job's event-time watermark past the last window."""
    from orbitmq import Producer

    with Producer("order-service-ticks", namesrv) as producer:
        body = json.dumps({"kind": "tick", "event_ms": event_ms}).encode()
        producer.send(Message(topic, body, tags="tick"))
