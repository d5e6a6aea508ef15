"""Capped exponential backoff with jitter: the one retry rhythm of every Redis loop.

Owns how long a loop waits after consecutive failures (the worker's reconnects, the
failure ingestor, the live broadcaster's subscriptions). The delay doubles from ``base``
up to ``cap``, and each wait is drawn from half to all of it, so a fleet that lost the
same Redis does not come back in lockstep. Never sleeps itself; callers sleep (sync or
async) for what ``failed()`` returns. Cost: a few float operations.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(slots=True)
class Backoff:
    """Consecutive failures and the next wait; ``succeeded()`` starts over."""

    base: float = 0.1
    cap: float = 30.0
    failures: int = 0

    def failed(self) -> float:
        """Count one more failure in a row and return the seconds to wait before retrying."""
        self.failures += 1
        ceiling = min(self.cap, self.base * 2.0 ** min(self.failures - 1, 30))
        return ceiling * random.uniform(0.5, 1.0)

    def succeeded(self) -> int:
        """Start over; returns how many failures in a row there had been (for a log line)."""
        failures, self.failures = self.failures, 0
        return failures
