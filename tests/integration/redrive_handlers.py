"""The handler of the redrive integration test (tests/integration/test_redrive_workers.py).

While the file named by ``ACKBOARD_TEST_BROKEN`` exists (the downstream is "broken"), it
raises PermanentFailure, so the worker dead-letters each entry at once. Once the file
is gone (the fix shipped), it writes one line per handled entry to
``ACKBOARD_TEST_HANDLER_LOG``: ``done <n> <entry id> <replay-of> <pid>``, where ``n`` is
the producer's own field, so a test can tell whether any original ran twice.
"""

from __future__ import annotations

import os

from queue_core import Job, PermanentFailure


def handle(job: Job) -> None:
    if os.path.exists(os.environ["ACKBOARD_TEST_BROKEN"]):
        raise PermanentFailure(f"downstream unavailable for order {job.fields.get('n')}")
    replay_of = job.fields.get("ackboard.replay-of", "-")
    line = f"done {job.fields.get('n')} {job.id} {replay_of} {os.getpid()}\n"
    with open(os.environ["ACKBOARD_TEST_HANDLER_LOG"], "a", encoding="utf-8") as f:
        f.write(line)
