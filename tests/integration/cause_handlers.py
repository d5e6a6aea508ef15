"""Handlers for the by-cause tests (tests/integration/test_causes_workers.py).

``fail`` raises one of three errors by the entry's ``cause`` field, each message holding
the entry's own ids and numbers (so only the fingerprint's normalization groups them),
unless the cause has been "fixed": a file named after it in the directory
``ACKBOARD_TEST_FIXED_DIR``. A fixed entry succeeds and logs ``done <id> <deliveries>``
to ``ACKBOARD_TEST_HANDLER_LOG``.
"""

from __future__ import annotations

import os
from pathlib import Path

from queue_core import Job


class GatewayTimeout(Exception):
    pass


def _charge(job: Job) -> None:
    cause = job.fields.get("cause", "")
    n = int(job.fields.get("n", "0"))
    if cause == "timeout":
        raise GatewayTimeout(f"payment gateway timed out after {1000 + n} ms for {job.id}")
    if cause == "key":
        raise KeyError(f"customer_{n}")
    if cause == "decline":
        raise ValueError(f"card ending {n:04d} declined (request id {n * 7919:x}abcdef)")


def fail(job: Job) -> None:
    cause = job.fields.get("cause", "")
    if not (Path(os.environ["ACKBOARD_TEST_FIXED_DIR"]) / cause).exists():
        _charge(job)
    with open(os.environ["ACKBOARD_TEST_HANDLER_LOG"], "a", encoding="utf-8") as f:
        f.write(f"done {job.id} {job.delivery_count}\n")
