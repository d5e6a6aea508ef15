"""Job handlers the browser tests run in a real ``manage.py queue_worker``."""

from __future__ import annotations

from queue_core import Job


def charge(job: Job) -> None:
    """Always fails, with the message the entry carries: a card that is declined."""
    raise RuntimeError(job.fields.get("fail", "card declined"))
