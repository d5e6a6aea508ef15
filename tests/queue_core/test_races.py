"""Races between operators, and between an operator and a worker, on real Redis.

Each test runs the racing sides on separate clients and threads, started together by a
barrier, and repeats over many entries so the sides really overlap.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis

from queue_core.bulk import bulk_dead_letter
from queue_core.keys import stream_keys
from queue_core.results import BulkOutcome
from queue_core.services import dlq_replay, entry_claim, entry_dead_letter
from queue_core.types import ActionRefused
from tests.factories import age_pending, make_pending

T = TypeVar("T")


@pytest.fixture
def clients(redis_url: str) -> Iterator[list[redis.Redis]]:
    pair = [redis.Redis.from_url(redis_url, socket_timeout=10) for _ in range(2)]
    try:
        yield pair
    finally:
        for client in pair:
            client.close()


def race(*sides: Callable[[], T]) -> list[T | BaseException]:
    """Run the sides at once on threads; return each one's result or exception."""
    barrier = threading.Barrier(len(sides))
    results: list[T | BaseException] = [RuntimeError("did not run")] * len(sides)

    def run(i: int, side: Callable[[], T]) -> None:
        barrier.wait()
        try:
            results[i] = side()
        except BaseException as exc:  # reported to the test, not swallowed
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(sides)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


class DeadLetterRaceTests:
    def test_two_operators_leave_one_dlq_copy(
        self, r: redis.Redis, stream: str, clients: list[redis.Redis]
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 100)
        for entry_id in ids:

            def side(client: redis.Redis, who: str, entry_id: str = entry_id) -> Any:
                return entry_dead_letter(
                    client=client,
                    stream=stream,
                    group="g",
                    entry_id=entry_id,
                    reason="race",
                    operator=who,
                )

            a, b = race(lambda: side(clients[0], "ann"), lambda: side(clients[1], "bob"))
            assert not isinstance(a, BaseException) and not isinstance(b, BaseException)
            assert (a is None) != (b is None)  # exactly one of them moved it
        dlq: Any = r.xrange(stream_keys(stream).dlq)
        origins = Counter(f[b"ackboard.origin-id"].decode() for _, f in dlq)
        assert origins == Counter(ids)  # one copy each
        assert r.xpending(stream, "g")["pending"] == 0

    def test_bulk_and_single_dead_letter_overlap_leaves_one_copy(
        self, r: redis.Redis, stream: str, clients: list[redis.Redis]
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 200)

        def bulk() -> Any:
            return bulk_dead_letter(
                client=clients[0],
                stream=stream,
                group="g",
                snapshot_id=ids[-1],
                reason="bulk",
                operator="ann",
                chunk_size=10,
            )

        def singles() -> list[Any]:
            return [
                entry_dead_letter(
                    client=clients[1], stream=stream, group="g", entry_id=i, reason="one"
                )
                for i in reversed(ids)
            ]

        bulk_result, single_results = race(bulk, singles)
        assert not isinstance(bulk_result, BaseException)
        assert not isinstance(single_results, BaseException)
        moved_by_single = {s.entry_id for s in single_results if s is not None}
        moved_by_bulk = set(bulk_result.done)
        assert moved_by_bulk.isdisjoint(moved_by_single)  # nobody moved an entry twice
        assert moved_by_bulk | moved_by_single == set(ids)  # and every entry was moved
        assert all(
            i.outcome in (BulkOutcome.DONE, BulkOutcome.NOT_PENDING) for i in bulk_result.items
        )
        dlq: Any = r.xrange(stream_keys(stream).dlq)
        assert Counter(f[b"ackboard.origin-id"].decode() for _, f in dlq) == Counter(ids)


class ClaimRaceTests:
    def test_claim_after_worker_reclaimed_is_refused(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "dead-worker", 1)
        age_pending(r, stream, "g", 60_000)  # past the sweep's 10 ms min-idle
        seen: Any = r.xpending_range(stream, "g", min=entry_id, max=entry_id, count=1)[0]
        # A live worker's sweep takes the entry after the operator's page loaded.
        claimed: Any = r.xautoclaim(stream, "g", "live", min_idle_time=10, start_id="0-0")
        assert [c[0].decode() for c in claimed[1]] == [entry_id]
        with pytest.raises(ActionRefused, match="^changed since you looked"):
            entry_claim(
                client=r,
                stream=stream,
                group="g",
                entry_id=entry_id,
                consumer="ackboard-operator",
                seen_idle_ms=seen["time_since_delivered"],
                seen_deliveries=seen["times_delivered"],
            )
        after: Any = r.xpending_range(stream, "g", min=entry_id, max=entry_id, count=1)[0]
        assert after["consumer"] == b"live" and after["times_delivered"] == 2

    def test_claims_racing_a_sweeping_worker_never_win_over_a_touch(
        self, r: redis.Redis, stream: str, clients: list[redis.Redis]
    ) -> None:
        ids = make_pending(r, stream, "g", "dead-worker", 200)
        age_pending(r, stream, "g", 60_000)  # a non-zero idle for the operator's look
        looks: Any = r.xpending_range(stream, "g", min="-", max="+", count=1000)
        stop = threading.Event()

        def worker() -> int:
            sweeps = 0
            cursor = "0-0"
            while not stop.is_set():
                reply: Any = clients[0].xautoclaim(
                    stream, "g", "live", min_idle_time=0, start_id=cursor, count=20, justid=True
                )
                cursor = reply[0].decode()
                sweeps += 1
            return sweeps

        def operator() -> list[Any]:
            outcomes: list[Any] = []
            try:
                # Opposite order to the worker's sweep, so the two sides meet on live entries.
                for look in reversed(looks):
                    try:
                        outcomes.append(
                            (
                                look,
                                entry_claim(
                                    client=clients[1],
                                    stream=stream,
                                    group="g",
                                    entry_id=look["message_id"].decode(),
                                    consumer="ops",
                                    seen_idle_ms=look["time_since_delivered"],
                                    seen_deliveries=look["times_delivered"],
                                    seen_consumer=look["consumer"].decode(),
                                ),
                            )
                        )
                    except ActionRefused as exc:
                        outcomes.append((look, exc))
            finally:
                stop.set()
            return outcomes

        results: list[Any] = race(worker, operator)
        sweeps, outcomes = results
        assert not isinstance(sweeps, BaseException) and sweeps > 0
        assert not isinstance(outcomes, BaseException) and len(outcomes) == len(ids)
        refused = 0
        for look, outcome in outcomes:
            if isinstance(outcome, ActionRefused):
                assert str(outcome).startswith("changed since you looked")
                refused += 1
            else:
                # Won only if nobody touched it in between (the JUSTID sweep leaves the count
                # alone, so the owner guard is what catches it): one more delivery, old owner.
                assert outcome.deliveries == look["times_delivered"] + 1
                assert outcome.previous_consumer == "dead-worker"
        assert refused > 0  # the worker's sweep did touch entries the operator had seen


class ReplayRaceTests:
    def test_two_replays_of_one_entry_add_one(
        self, r: redis.Redis, stream: str, clients: list[redis.Redis]
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 30)
        for entry_id in ids:
            moved = entry_dead_letter(
                client=r, stream=stream, group="g", entry_id=entry_id, reason="x"
            )
            assert moved is not None
            a, b = race(
                lambda c=clients[0], d=moved.dlq_id: dlq_replay(client=c, stream=stream, dlq_id=d),
                lambda c=clients[1], d=moved.dlq_id: dlq_replay(client=c, stream=stream, dlq_id=d),
            )
            assert isinstance(a, ActionRefused) != isinstance(b, ActionRefused)
        assert r.xlen(stream) == 2 * len(ids)  # each original plus exactly one replay
        assert r.xlen(stream_keys(stream).dlq) == 0
