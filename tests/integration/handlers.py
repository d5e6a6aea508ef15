"""Handlers for tests that run ``manage.py queue_worker`` in a subprocess.

They report through a file named by ``ACKBOARD_TEST_HANDLER_LOG`` (one line per event)
so the test can see what ran, and sleep ``ACKBOARD_TEST_SLEEP_S`` to be caught mid-run.
"""

from __future__ import annotations

import os
import time

from queue_core import Job

#: Not a handler: ``--handler tests.integration.handlers:NOT_CALLABLE`` must be refused.
NOT_CALLABLE = 42


def _log(line: str) -> None:
    with open(os.environ["ACKBOARD_TEST_HANDLER_LOG"], "a", encoding="utf-8") as f:
        f.write(line + "\n")


def slow(job: Job) -> None:
    _log(f"start {job.id} {job.delivery_count}")
    time.sleep(float(os.environ.get("ACKBOARD_TEST_SLEEP_S", "1")))  # the job's work
    _log(f"done {job.id} {job.delivery_count}")


def quick(job: Job) -> None:
    _log(f"done {job.id} {job.delivery_count}")
