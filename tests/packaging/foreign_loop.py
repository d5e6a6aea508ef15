"""A worker loop Ackboard did not write, run by the wheel's own virtual environment.

Uses only the standard library, redis-py and the installed ``queue_core``: never this
checkout (the test runs it with ``python -I`` from a temp dir). A plain XAUTOCLAIM /
XREADGROUP / XACK loop on one group that:

- wraps its handler with ``failure_recorded`` (failures recorded, dead-lettered on
  delivery ``--max-deliveries``);
- sends a heartbeat each pass with ``heartbeat_send``, which also reads the group's pause,
  and reads nothing while a pause holds (confirming it in the heartbeat);
- exits once a pass, not paused, finds nothing to reclaim or read, with a last heartbeat
  that says it stopped.

The handler fails by the entry's ``kind`` field: ``flaky`` on its first delivery only,
``poison`` always. Prints one JSON line: the counts, where ``queue_core`` was imported
from, its version, and whether Django was loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

import redis

import queue_core
from queue_core import (
    Heartbeat,
    Outcome,
    __version__,
    failure_recorded,
    heartbeat_send,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--url", "--stream", "--group", "--consumer"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--max-deliveries", type=int, default=2)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url, decode_responses=True, socket_timeout=10)
    failed_once: set[str] = set()

    def handle(fields: dict[str, str]) -> str:
        kind = fields.get("kind", "ok")
        if kind == "poison":
            raise ValueError(f"cannot parse job {fields.get('job')}")
        if kind == "flaky" and fields["job"] not in failed_once:
            failed_once.add(fields["job"])
            raise ConnectionError("upstream timed out")
        return "done"

    recorded = failure_recorded(handle, client=client, stream=args.stream, group=args.group,
                                consumer=args.consumer,
                                max_deliveries=args.max_deliveries)  # fmt: skip
    counts = {"acked": 0, "failed": 0, "dead_lettered": 0, "paused_passes": 0}
    started_ms = int(time.time() * 1000)

    def beat(*, pause_at_ms: int | None, stopped: bool = False) -> Heartbeat:
        seen_ms = int(time.time() * 1000)
        return Heartbeat(
            consumer=args.consumer, host=socket.gethostname(), pid=os.getpid(),
            version=__version__, concurrency=1, running=0, buffered=0,
            processed=counts["acked"] + counts["dead_lettered"], failed=counts["failed"],
            started_ms=started_ms, seen_ms=seen_ms, paused=pause_at_ms is not None,
            pause_at_ms=pause_at_ms, stopped_ms=seen_ms if stopped else None,
        )  # fmt: skip

    confirmed: int | None = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # The pause this pass sees is confirmed by the next beat: nothing is in flight.
        pause = heartbeat_send(client=client, stream=args.stream, group=args.group,
                               beat=beat(pause_at_ms=confirmed))  # fmt: skip
        if pause is not None and pause.active(int(time.time() * 1000)):
            confirmed = pause.at_ms
            counts["paused_passes"] += 1
            time.sleep(0.05)  # the paused worker's own pace between passes, as a real one has
            continue
        confirmed = None
        claimed = client.xautoclaim(args.stream, args.group, args.consumer, min_idle_time=0,
                                    start_id="0-0", count=10)  # fmt: skip
        fresh = client.xreadgroup(args.group, args.consumer, {args.stream: ">"}, count=10)
        entries = [*claimed[1], *(fresh[0][1] if fresh else [])]
        if not entries:
            break
        for entry_id, fields in entries:
            try:
                result = recorded(entry_id, fields)
            except Exception:
                counts["failed"] += 1  # left pending: the next pass reclaims it
                continue
            if result is Outcome.DEAD_LETTERED:
                counts["dead_lettered"] += 1  # the move acked it
                continue
            client.xack(args.stream, args.group, entry_id)
            counts["acked"] += 1
    heartbeat_send(client=client, stream=args.stream, group=args.group,
                   beat=beat(pause_at_ms=None, stopped=True))  # fmt: skip
    print(json.dumps({**counts, "queue_core": queue_core.__file__, "version": __version__,
                      "django_loaded": "django" in sys.modules}))  # fmt: skip


if __name__ == "__main__":
    main()
