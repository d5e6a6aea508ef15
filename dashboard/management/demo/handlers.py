"""Job handlers for the demo's workers: ``normal``, ``flaky`` and ``slow``.

What goes wrong is decided by the payload, so the same entry fails the same way for
every group that reads it (a poison order is poison for billing and shipping alike):

- a payload that is not JSON, or an email to a ``.invalid`` address, raises
  PermanentFailure: the worker dead-letters it at once, with the reason;
- an order in an unsupported currency raises ValueError on every attempt: it is
  *poison*, retried until ``--max-deliveries`` moves it to the dead-letter stream;
- ``flaky`` adds transient failures (a payment gateway timing out) that succeed on a
  later delivery, so the failure log fills while nothing is lost.

Timings and the flaky rate come from the environment (``ACKBOARD_DEMO_SLOW_MS``,
``ACKBOARD_DEMO_FLAKY_RATE``) so tests can speed them up. Handlers do no real work and
touch nothing but the clock, so they are trivially idempotent, as every handler must be.
They never import Django: workers need no database.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

from queue_core.jobs import Job, PermanentFailure

#: Currencies the pretend payment provider accepts; anything else is poison.
CURRENCIES = frozenset({"EUR", "USD", "GBP", "JPY"})


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def flaky_rate() -> float:
    """Chance that one ``flaky`` attempt fails with a transient error."""
    return min(max(_env_float("ACKBOARD_DEMO_FLAKY_RATE", 0.2), 0.0), 1.0)


def slow_ms() -> float:
    """Longest time one ``slow`` job takes, in ms; each takes between a quarter and all of it."""
    return max(_env_float("ACKBOARD_DEMO_SLOW_MS", 1200.0), 0.0)


def _check(job: Job) -> dict[str, Any]:
    """Parse and validate the payload; raise the failure the payload calls for."""
    payload = job.json("payload")  # PermanentFailure when missing or not JSON
    if not isinstance(payload, dict):
        raise PermanentFailure(f"payload is a JSON {type(payload).__name__}, not an object")
    to = str(payload.get("to", ""))
    if to.endswith(".invalid"):
        raise PermanentFailure(f"550 mailbox unavailable: {to}")
    currency = payload.get("currency")
    if currency is not None and currency not in CURRENCIES:
        # Retrying cannot help, but the handler does not know that: a classic poison entry.
        raise ValueError(f"unsupported currency {currency!r} for order {payload.get('order')}")
    return payload


def normal(job: Job) -> None:
    """A quick job (5–30 ms) that fails only when the payload says so."""
    _check(job)
    time.sleep(random.uniform(0.005, 0.03))


def flaky(job: Job) -> None:
    """Like ``normal``, plus transient failures at ``ACKBOARD_DEMO_FLAKY_RATE``."""
    payload = _check(job)
    time.sleep(random.uniform(0.005, 0.03))
    if random.random() < flaky_rate():
        raise TimeoutError(
            f"payment gateway timed out for order {payload.get('order')} "
            f"(attempt {job.delivery_count})"
        )


async def slow(job: Job) -> None:
    """An I/O-bound job (an async sleep); run it with ``--concurrency`` above 1."""
    _check(job)
    longest = slow_ms() / 1000
    await asyncio.sleep(random.uniform(longest / 4, longest))
