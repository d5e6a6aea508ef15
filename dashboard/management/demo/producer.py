"""The demo's producer: creates the demo groups and XADDs orders and emails at a steady rate.

The schedule of bad entries is fixed by sequence number, not random, so a fresh demo
shows every failure path within seconds: order #3 is poison (every 20th after it), order
#11 is not JSON (every 50th), order #29 carries a non-UTF-8 field that the worker's
parser rejects (every 50th), email #2 bounces (every 15th). Email payloads carry an
``api_token`` field to show the dashboard's redaction.

It only ever XADDs to ``demo:`` streams (capped with MAXLEN ~) and creates groups; it
never deletes or flushes anything, except ``demo_reset``, which deletes ``demo:`` keys
only and only when the operator asks for it (``demo --reset``).
"""

from __future__ import annotations

import json
import logging
import random
import threading

import redis

from dashboard.management.demo import DEMO_PREFIX, EMAILS, ORDERS, demo_groups
from dashboard.management.demo.handlers import CURRENCIES
from queue_core.connection import Client
from queue_core.errors import group_exists

log = logging.getLogger("dashboard.demo.producer")

#: Streams are trimmed to about this many entries, so a demo left running stays small.
#: Entries trimmed while still pending show up as "payload missing", as in production.
MAXLEN = 50_000

_CUSTOMERS = ("ada", "grace", "linus", "margaret", "ken", "barbara", "dennis", "radia")
_TEMPLATES = ("welcome", "receipt", "password-reset", "shipping-update")


def order_fields(seq: int, rng: random.Random) -> dict[str, str | bytes]:
    """Fields of order number ``seq`` (1-based)."""
    if seq % 50 == 11:
        # Truncated JSON: the handler raises PermanentFailure and the worker dead-letters it.
        return {"type": "order.created", "payload": f'{{"order": {seq}, "currency": "EU'}
    if seq % 50 == 29:
        # Binary junk: the worker's parser rejects it before any handler runs (dead-lettered
        # at once), and the dashboard shows it binary-safe.
        return {"type": "order.created", "payload": "{}", "invoice_pdf": b"%PDF-\xff\xfe\x00"}
    currency = "XXX" if seq % 20 == 3 else rng.choice(sorted(CURRENCIES))
    payload = {
        "order": seq,
        "customer": rng.choice(_CUSTOMERS),
        "amount": round(rng.uniform(5, 500), 2),
        "currency": currency,
        "items": rng.randint(1, 6),
    }
    return {"type": "order.created", "payload": json.dumps(payload)}


def email_fields(seq: int, rng: random.Random) -> dict[str, str]:
    """Fields of email number ``seq`` (1-based)."""
    customer = rng.choice(_CUSTOMERS)
    domain = "example.invalid" if seq % 15 == 2 else "example.com"
    payload = {"email": seq, "to": f"{customer}@{domain}", "template": rng.choice(_TEMPLATES)}
    return {
        "type": "email.requested",
        "payload": json.dumps(payload),
        # Redacted by the dashboard (ACKBOARD_REDACT_PATTERN matches "token").
        "api_token": f"demo-{rng.getrandbits(64):016x}",
    }


def demo_groups_create(*, client: Client) -> None:
    """Create every demo group at the start of its stream (MKSTREAM); existing ones stay."""
    for stream, groups in demo_groups().items():
        for group in groups:
            try:
                client.xgroup_create(stream, group, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if not group_exists(exc):
                    raise


def demo_reset(*, client: Client) -> int:
    """Delete the demo's own keys (``demo:*`` and ``{demo:*``); returns how many."""
    deleted = 0
    for pattern in (DEMO_PREFIX + "*", "{" + DEMO_PREFIX + "*"):
        for key in client.scan_iter(match=pattern, count=1000):
            deleted += int(client.delete(key))
    return deleted


class Producer:
    """XADDs one order per tick and one email every other tick, on its own thread."""

    def __init__(self, *, client: Client, rate: float, seed: int | None = None) -> None:
        self.client = client
        self.rate = rate
        self.rng = random.Random(seed)
        self.orders = 0
        self.emails = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)

    def add(self, *, orders: int, emails: int) -> None:
        """Add the next ``orders`` orders and ``emails`` emails in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        # redis-py types xadd's fields as an invariant dict of unions; ours are narrower.
        for _ in range(orders):
            self.orders += 1
            order = order_fields(self.orders, self.rng)
            pipe.xadd(ORDERS, order, maxlen=MAXLEN, approximate=True)  # type: ignore[arg-type]
        for _ in range(emails):
            self.emails += 1
            email = email_fields(self.emails, self.rng)
            pipe.xadd(EMAILS, email, maxlen=MAXLEN, approximate=True)  # type: ignore[arg-type]
        pipe.execute()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        if self.rate <= 0:  # rate 0 means "the backlog only"
            return
        interval = 1.0 / self.rate
        tick = 0
        while not self._stop.wait(interval):
            tick += 1
            try:
                self.add(orders=1, emails=tick % 2)
            except redis.RedisError as exc:
                # Keep producing after a blip; the demo's supervisor decides when to stop.
                log.warning("demo producer could not XADD: %s", exc)
                self._stop.wait(1.0)
