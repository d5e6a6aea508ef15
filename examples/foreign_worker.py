"""A workshop-style Redis Streams worker that Ackboard did not write, adapted in two lines.

The worker is shaped like the workshop's ``queue_agents`` worker: an asyncio loop on
``redis.asyncio`` (decoded responses), stream ``reviews:queue``, group ``reviewers``, flat
string fields ``reviewId`` and ``prUrl``, and ``process_entry(client, entry_id, fields,
handler)`` that XACKs when the handler returns and leaves the entry pending when it raises.
The lines marked ``Ackboard`` are the whole adaptation: wrap the handler once with
``queue_core.failure_recorded_async`` and pass it the entry id. The loop is unchanged.

Its failures then reach ``{reviews:queue}:failures`` with the same records and events as
Ackboard's own worker, so the group page's "Last failure", the entry's "Failure history",
the Failures page and "Failures 1 h" show them (after ``manage.py ingest_failures``), and an
entry that fails ``--max-deliveries`` times moves to ``{reviews:queue}:dlq`` atomically.

Try it against a Redis you own (never a production one)::

    uv run python -m examples.foreign_worker --url redis://127.0.0.1:6379/0 --seed 3 \\
        --reclaim-idle-ms 0 --until-idle

``--seed N`` adds N reviews, every third of which fails; ``--until-idle`` exits once nothing
is left to read or reclaim. Without it the worker runs until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from queue_core import Outcome, failure_recorded_async

STREAM = "reviews:queue"
GROUP = "reviewers"


@dataclass(frozen=True)
class ReviewJob:
    review_id: str
    pr_url: str


#: After the adaptation the loop calls the handler with the entry id first.
EntryHandler = Callable[[str, ReviewJob], Awaitable[Any]]


def job_from_fields(fields: dict[str, str]) -> ReviewJob | None:
    review_id, pr_url = fields.get("reviewId"), fields.get("prUrl")
    return ReviewJob(review_id, pr_url) if review_id and pr_url else None


async def process_entry(
    client: aioredis.Redis, stream: str, entry_id: str, fields: dict[str, str],
    handler: EntryHandler,
) -> Any:  # fmt: skip
    """The workshop's contract: XACK when the handler returns; on an error, log and leave
    the entry pending. Returns what the handler returned, or the error."""
    try:
        job = job_from_fields(fields)
        result = await handler(entry_id, job) if job else None  # Ackboard: the entry id
        # A dead-lettered entry was acked by the move; this XACK is then a no-op. A loop
        # may skip it: `if result is Outcome.DEAD_LETTERED`.
        await client.xack(stream, GROUP, entry_id)
        return result
    except Exception as err:
        print(f"[worker] entry {entry_id} failed (left pending for retry): {err}")
        return err


async def consume(
    client: aioredis.Redis,
    handler: Callable[[ReviewJob], Awaitable[None]],
    *,
    stream: str,
    consumer: str,
    max_deliveries: int,
    reclaim_idle_ms: int,
    until_idle: bool,
    stop: asyncio.Event,
) -> dict[str, int]:
    """The loop: reclaim stale entries, read new ones, one ``process_entry`` each."""
    try:
        await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except aioredis.ResponseError as err:
        if "BUSYGROUP" not in str(err):
            raise
    recorded = failure_recorded_async(  # Ackboard: one wrap, nothing else changes
        handler, client=client, stream=stream, group=GROUP, consumer=consumer,
        max_deliveries=max_deliveries,
    )  # fmt: skip
    counts = {"acked": 0, "failed": 0, "dead_lettered": 0}
    while not stop.is_set():
        # redis-py types these replies as wide unions; with RESP2 they are lists.
        claimed: Any = await client.xautoclaim(
            stream, GROUP, consumer, min_idle_time=reclaim_idle_ms, start_id="0-0"
        )
        fresh: Any = await client.xreadgroup(GROUP, consumer, {stream: ">"}, count=10, block=200)
        entries = [*claimed[1], *(fresh[0][1] if fresh else [])]
        if not entries and until_idle:
            break
        for entry_id, fields in entries:
            result = await process_entry(client, stream, entry_id, fields, recorded)
            if isinstance(result, Exception):
                counts["failed"] += 1
            elif result is Outcome.DEAD_LETTERED:
                counts["dead_lettered"] += 1
            else:
                counts["acked"] += 1
    return counts


async def review(job: ReviewJob) -> None:
    """A stand-in for the workshop's review pipeline: some pull requests cannot be fetched."""
    if job.pr_url.endswith("/0"):
        raise RuntimeError(f"could not fetch the diff of {job.pr_url}")


async def main(argv: list[str] | None = None) -> dict[str, int]:
    default_url = os.environ.get("VALKEY_URL") or os.environ.get("REDIS_URL")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=default_url or "redis://127.0.0.1:6379")
    parser.add_argument("--stream", default=STREAM)
    parser.add_argument("--consumer", default=f"worker-{os.getpid()}")
    parser.add_argument("--max-deliveries", type=int, default=3)
    parser.add_argument("--reclaim-idle-ms", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=0, help="Add this many reviews first.")
    parser.add_argument("--until-idle", action="store_true", help="Exit when idle.")
    args = parser.parse_args(argv)
    client = aioredis.Redis.from_url(args.url, decode_responses=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        for n in range(args.seed):
            pr_url = f"https://github.com/acme/app/pull/{n % 3}"  # every third is pull/0: fails
            await client.xadd(args.stream, {"reviewId": f"r{n}", "prUrl": pr_url})
        counts = await consume(
            client, review, stream=args.stream, consumer=args.consumer,
            max_deliveries=args.max_deliveries, reclaim_idle_ms=args.reclaim_idle_ms,
            until_idle=args.until_idle, stop=stop,
        )  # fmt: skip
    finally:
        await client.aclose()
    print(" ".join(f"{name}={n}" for name, n in counts.items()))
    return counts


if __name__ == "__main__":
    asyncio.run(main())
