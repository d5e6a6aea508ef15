"""Ackboard's own ``Worker``, run from the wheel's virtual environment without hiredis.

Drains one group (``run(drain=True)``: it returns once a read finds nothing new and all it
took is settled) with a handler that fails by the entry's ``kind`` field: ``poison`` with
a ``PermanentFailure`` (dead-lettered at once), anything else returns. Prints the run's
counters as one JSON line, and whether hiredis and Django were loaded.
"""

from __future__ import annotations

import argparse
import json
import sys

from queue_core import Job, PermanentFailure, Worker


def handle(job: Job) -> None:
    if job.fields.get("kind") == "poison":
        raise PermanentFailure(f"job {job.fields.get('job')} can never succeed")


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--url", "--stream", "--group", "--consumer"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    worker = Worker(url=args.url, stream=args.stream, group=args.group, consumer=args.consumer,
                    handler=handle, group_start="0", block_ms=100)  # fmt: skip
    stats = worker.run(drain=True)
    print(json.dumps({"acked": stats.acked, "dead_lettered": stats.dead_lettered,
                      "failed": stats.failed, "hiredis_loaded": "hiredis" in sys.modules,
                      "django_loaded": "django" in sys.modules}))  # fmt: skip


if __name__ == "__main__":
    main()
