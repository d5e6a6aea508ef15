"""Handlers for the cluster failover test's ``manage.py queue_worker`` processes.

Each delivery appends ``<pid> <entry id> <n> <delivery count>`` to the file named by
``ACKBOARD_TEST_HANDLER_LOG`` (one ``write`` of one short line on an O_APPEND file, so
lines of concurrent workers never interleave). A job whose ``fail`` field is ``1`` always
raises, so it ends in the dead-letter stream; the rest sleep ``ACKBOARD_TEST_SLEEP_S``.
"""

from __future__ import annotations

import os
import time

from queue_core import Job


def job(job: Job) -> None:
    line = f"{os.getpid()} {job.id} {job.fields['n']} {job.delivery_count}\n"
    with open(os.environ["ACKBOARD_TEST_HANDLER_LOG"], "a", encoding="utf-8") as f:
        f.write(line)
    if job.fields.get("fail") == "1":
        raise RuntimeError(f"job {job.fields['n']} always fails")
    time.sleep(float(os.environ.get("ACKBOARD_TEST_SLEEP_S", "0")))  # the job's work
