"""Handlers for the worker-fleet tests (``manage.py queue_worker --processes N``).

Each writes one line per event to the file named by ``ACKBOARD_TEST_HANDLER_LOG``:
``<event> <entry id> <delivery count> <consumer> <pid>``, so a test can tell which
process ran what. An entry with a ``sleep`` field sleeps that many seconds on its first
delivery only: it can be caught mid-run, and its redelivery (after a SIGKILL) is quick.
"""

from __future__ import annotations

import os
import time

from queue_core import Job


def _log(event: str, job: Job) -> None:
    line = f"{event} {job.id} {job.delivery_count} {job.consumer} {os.getpid()}\n"
    with open(os.environ["ACKBOARD_TEST_HANDLER_LOG"], "a", encoding="utf-8") as f:
        f.write(line)


def record(job: Job) -> None:
    sleep = float(job.fields.get("sleep", "0")) if job.delivery_count == 1 else 0.0
    if sleep:
        _log("start", job)
        time.sleep(sleep)  # the job's work: long enough to be killed or stopped mid-run
    _log("done", job)
