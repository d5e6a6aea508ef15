"""The Worker's reclaim sweep: its cursor, what it holds, and what a sweep's claims become.

Owns telling a sweep's deliveries apart: an entry this worker still has in hand (waiting,
running, or with its ack or outcome on the way) is not a new delivery, so its count goes
back to what it was; any other is admitted through the contract (``intake.Intake.admit``).
The sweep itself is ``sweep_once``: Retry later's release step for the worker's group
(``queue_core.later``: parked entries kept parked, due ones handed back), then
``once.reclaim_stale``, run by ``loop.Worker`` in a thread. Never acks and never runs a
handler. Cost: O(held) to list what is held, once per sweep; one more round trip when the
group has nothing parked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from queue_core.connection import Client
from queue_core.jobs import Delivery, Job, Reclaimed
from queue_core.later import later_release
from queue_core.worker.config import WorkerConfig
from queue_core.worker.inflight import InFlight
from queue_core.worker.intake import Intake
from queue_core.worker.once import delivery_counts_restore, reclaim_stale
from queue_core.worker.settle import SettleBatch
from queue_core.worker.wire import AckBatch

log = logging.getLogger("queue_core.worker")


@dataclass
class Sweep:
    """The reclaim sweep: XAUTOCLAIM's cursor, kept between sweeps, and the next one's time."""

    cursor: str = "0-0"
    next_at: float = 0.0
    task: asyncio.Task[None] | None = None


def sweep_once(*, client: Client, stream: str, group: str, **reclaim: Any) -> Reclaimed:
    """One reclaim sweep: Retry later's release step first, so an entry parked until later
    is made just-delivered again before this XAUTOCLAIM could take it (every worker of the
    group does this once per sweep, at least twice per min-idle by default), and a due one
    is taken by it; then ``reclaim_stale`` with ``reclaim``. A failed release step is
    logged and the sweep goes on: its entries are reclaimed early at worst, never lost."""
    try:
        later_release(client=client, stream=stream, group=group)
    except redis.ResponseError as exc:
        log.warning("retry later release of %s %s refused: %s", stream, group, exc)
    return reclaim_stale(client=client, stream=stream, group=group, **reclaim)


def held_ids(flight: InFlight, acks: AckBatch, settles: SettleBatch) -> set[str]:
    """Entries this worker still has in hand: waiting, running, or with their outcome
    (ack, failure record, dead-letter) not yet written. O(held), once per sweep."""
    held = flight.ids()
    for ids in (acks.waiting, acks.sending):
        held.update(i.decode() if isinstance(i, bytes) else i for i in ids)
    for items in (settles.queued, settles.writing):
        held.update(item.entry_id for item in items)
    return held


def deliveries_sort(
    deliveries: Iterable[Delivery], *, held: set[str], intake: Intake
) -> tuple[list[Job], dict[str, int]]:
    """The jobs a sweep's deliveries admit, and the delivery counts to restore of the
    held ones (XAUTOCLAIM added one to each)."""
    jobs = []
    recounts: dict[str, int] = {}
    for delivery in deliveries:
        if delivery.id in held:
            # Still running here, or its ack or outcome is on its way: not a new
            # delivery, so its count goes back to what it was (XAUTOCLAIM added one).
            recounts[delivery.id] = delivery.delivery_count - 1
            continue
        job = intake.admit(delivery.id, delivery.fields, delivery.delivery_count)
        if job is not None:
            jobs.append(job)
    return jobs, recounts


async def counts_restore(client: Client, config: WorkerConfig, counts: dict[str, int]) -> None:
    """Put the held entries' delivery counts back (in a thread); a failure is logged."""
    try:
        await asyncio.to_thread(
            delivery_counts_restore, client=client, stream=config.stream,
            group=config.group, consumer=config.consumer, counts=counts,
        )  # fmt: skip
    except (redis.RedisError, RedisClusterException, OSError) as exc:
        # The counts stay one higher: an entry may be dead-lettered one attempt
        # early, never acked without its handler. Logged, not fatal.
        log.warning("restoring delivery counts of %d held entries of %s failed: %s",
                    len(counts), config.stream, exc)  # fmt: skip
