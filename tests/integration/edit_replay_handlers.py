"""The handler of test_edit_replay_workers.py, run by ``manage.py queue_worker``.

``charge`` refuses a negative amount for good (PermanentFailure: the entry is
dead-lettered at once) and logs every entry it charged to ``ACKBOARD_TEST_HANDLER_LOG``.
"""

from __future__ import annotations

import os

from queue_core import Job
from queue_core.jobs import PermanentFailure


def charge(job: Job) -> None:
    amount = job.json("payload")["amount"]
    if amount < 0:
        raise PermanentFailure(f"cannot charge a negative amount ({amount})")
    with open(os.environ["ACKBOARD_TEST_HANDLER_LOG"], "a", encoding="utf-8") as f:
        f.write(f"charged {job.id} {amount} edited={job.fields.get('ackboard.edited', '')}\n")
