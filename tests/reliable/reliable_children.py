"""Child processes of the crash tests, each killed with SIGKILL by its test at a chosen moment.

    python reliable_children.py relay --db URL --namesrv ADDR --lease S
        a relay that sends one round, prints ``SENT n``, and hangs before marking the rows sent
        (the moment a crash makes the rows go out twice);
    python reliable_children.py consumer --db URL --namesrv ADDR --topic T --group G
        a push consumer whose idempotent handler credits points, and on a message with body
        ``die`` prints ``IN HANDLER`` and hangs inside its transaction.
"""

from __future__ import annotations

import argparse
import sys
import threading

from orbitmq import ConsumeFrom, MessageExt, PushConsumer
from orbitmq.reliable import ConsumeLog, Outbox, OutboxRelay, RelayConfig, SqlHandle, idempotent


class StallingOutbox(Outbox):
    """Marks nothing: announces the sent rows and waits to be killed."""

    def mark_sent(self, handle, owner, sent):  # type: ignore[no-untyped-def]
        print(f"SENT {len(list(sent))}", flush=True)
        threading.Event().wait()
        return 0


def credit(msg: MessageExt, tx: SqlHandle) -> None:
    """The effect to apply once: +1 for the message's key (its body tells how to behave)."""
    tx.execute("INSERT INTO effects (k, n) VALUES (?, 1) ON CONFLICT (k) DO UPDATE "
               "SET n = effects.n + 1", (msg.keys[0],))
    if msg.body == b"die":
        print("IN HANDLER", flush=True)
        threading.Event().wait()


def run_relay(args: argparse.Namespace) -> None:
    config = RelayConfig(lease=args.lease, send_timeout=args.lease / 2, poll_interval=0.05)
    relay = OutboxRelay(args.db, namesrv=args.namesrv, outbox=StallingOutbox(), config=config,
                        send_timeout=args.lease / 4)
    relay.setup()
    while relay.run_once() == 0:
        pass


def run_consumer(args: argparse.Namespace) -> None:
    log = ConsumeLog(args.db, processing_timeout=args.lease)
    consumer = PushConsumer(args.group, namesrv=args.namesrv, consume_from=ConsumeFrom.FIRST,
                            rebalance_interval_ms=1000, persist_consumer_offset_interval_ms=500)
    consumer.subscribe(args.topic, "*", idempotent(log)(credit))
    consumer.start()
    print("READY", flush=True)
    threading.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["relay", "consumer"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", default="")
    parser.add_argument("--group", default="")
    parser.add_argument("--lease", type=float, default=4.0)
    args = parser.parse_args()
    (run_relay if args.mode == "relay" else run_consumer)(args)


if __name__ == "__main__":
    sys.exit(main())
