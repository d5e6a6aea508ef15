"""The public failure API (``queue_core.recording``) driven by plain redis-py worker loops.

The loops here are written the way a worker that is not Ackboard's is: XREADGROUP (and an
XAUTOCLAIM sweep for redeliveries), the handler, XACK when it returns, nothing when it
raises. They never use ``queue_core.Worker``. What they write is compared with what the
Worker's own code path (``process_entry``) writes for the same failure.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from queue_core import (
    Outcome,
    PermanentFailure,
    entry_pending,
    failed_attempt_record,
    failed_attempt_record_async,
    failed_entry_dead_letter,
    failed_entry_dead_letter_async,
    failure_recorded,
    failure_recorded_async,
    process_entry,
)
from queue_core.failures import MAX_MESSAGE, MAX_TRACEBACK
from queue_core.jobs import Job
from queue_core.keys import (
    DEAD_LETTER_FIELDS,
    DEAD_LETTERED_AT_FIELD,
    DELIVERIES_FIELD,
    EVENTS_CHANNEL,
    LAST_ERROR_FIELD,
    ORIGIN_ID_FIELD,
    ORIGIN_STREAM_FIELD,
    REASON_FIELD,
    stream_keys,
)
from queue_core.scripts import DEAD_LETTER
from tests.factories import CountingRedis, add_entries, make_group

GROUP = "reviewers"
ME = "worker-1"
#: Fields that differ between any two records by nature (time, the id, the call stack).
VARYING_RECORD = {"entry_id", "failed_at_ms", "duration_ms", "traceback"}
#: Dead-letter metadata that differs between two moves by nature.
VARYING_DLQ = {ORIGIN_ID_FIELD, DEAD_LETTERED_AT_FIELD, ORIGIN_STREAM_FIELD}


class Boom(Exception):
    pass


# -- Plain worker loops, as a foreign worker writes them --------------------------------


def plain_loop_once(
    client: redis.Redis, stream: str, handle: Callable[[str, dict[Any, Any]], Any]
) -> dict[str, Any]:
    """One pass of a workshop-style loop: sweep redeliveries (min idle 0), read new entries,
    run ``handle(entry_id, fields)`` and XACK when it returns. Returns id -> what happened:
    the handler's result when it returned (and was acked), or the exception it raised."""
    seen: dict[str, Any] = {}
    claimed = client.xautoclaim(stream, GROUP, ME, min_idle_time=0, start_id="0-0", count=100)
    fresh = client.xreadgroup(GROUP, ME, {stream: ">"}, count=100) or [[stream, []]]
    for raw_id, fields in [*claimed[1], *fresh[0][1]]:
        entry_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
        try:
            result = handle(entry_id, fields)
        except Exception as exc:
            seen[entry_id] = exc  # the loop logs and moves on; the entry stays pending
            continue
        client.xack(stream, GROUP, entry_id)
        seen[entry_id] = result
    return seen


async def plain_loop_once_async(
    client: redis.asyncio.Redis,
    stream: str,
    handle: Callable[[str, dict[Any, Any]], Awaitable[Any]],
) -> dict[str, Any]:
    """``plain_loop_once`` with redis.asyncio, as the workshop's ``consume_reviews`` runs."""
    seen: dict[str, Any] = {}
    claimed = await client.xautoclaim(stream, GROUP, ME, min_idle_time=0, start_id="0-0")
    fresh = await client.xreadgroup(GROUP, ME, {stream: ">"}, count=100) or [[stream, []]]
    for entry_id, fields in [*claimed[1], *fresh[0][1]]:
        try:
            result = await handle(entry_id, fields)
        except Exception as exc:
            seen[entry_id] = exc
            continue
        await client.xack(stream, GROUP, entry_id)
        seen[entry_id] = result
    return seen


# -- Helpers -------------------------------------------------------------------------------


def records(r: redis.Redis, stream: str) -> list[dict[str, str]]:
    rows = r.xrange(stream_keys(stream).failures)
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in rows]


def dead_letters(r: redis.Redis, stream: str) -> list[dict[str, str]]:
    rows = r.xrange(stream_keys(stream).dlq)
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in rows]


def pending_ids(r: redis.Redis, stream: str, group: str = GROUP) -> list[str]:
    rows = r.xpending_range(stream, group, min="-", max="+", count=100)
    return [row["message_id"].decode() for row in rows]


def stable(record: dict[str, str], varying: set[str]) -> dict[str, str]:
    return {k: v for k, v in record.items() if k not in varying}


def review(n: int) -> dict[str, str]:
    """The workshop's flat string fields."""
    return {"reviewId": f"r{n}", "prUrl": f"https://github.com/acme/app/pull/{n}"}


def worker_record(r: redis.Redis, stream: str, exc: Exception) -> dict[str, str]:
    """The record Ackboard's own worker path (``process_entry``) writes for ``exc``."""
    make_group(r, stream, GROUP)
    (entry_id,) = add_entries(r, stream, 1, fields=review(0))
    fields = r.xreadgroup(GROUP, ME, {stream: ">"})[0][1][0][1]

    def handler(job: Job) -> None:
        raise exc

    outcome = process_entry(client=r, stream=stream, group=GROUP, consumer=ME,
                            entry_id=entry_id, fields=fields, handler=handler)  # fmt: skip
    assert outcome is Outcome.FAILED
    (record,) = records(r, stream)
    return record


@pytest.fixture
def published(r: redis.Redis) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    pubsub = r.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(EVENTS_CHANNEL)
    assert pubsub.get_message(timeout=1)  # the subscription

    def drain() -> list[dict[str, Any]]:
        got = []
        while (message := pubsub.get_message(timeout=0.3)) is not None:
            got.append(json.loads(message["data"]))
        return got

    yield drain
    pubsub.close()


@pytest.fixture
async def ar(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    """An asyncio client configured like the workshop's: decoded responses."""
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


# -- Recording a failed attempt --------------------------------------------------------------


class FailedAttemptRecordTests:
    def test_a_plain_loop_writes_the_workers_record_and_event(
        self, r: redis.Redis, stream: str, published: Callable[[], list[dict[str, Any]]]
    ) -> None:
        theirs = worker_record(r, stream + ":worker", Boom("review service said 503"))
        published()
        make_group(r, stream, GROUP)
        (entry_id,) = add_entries(r, stream, 1, fields=review(1))

        def handle(entry_id: str, fields: dict[bytes, bytes]) -> None:
            try:
                raise Boom("review service said 503")
            except Boom as exc:
                failed_attempt_record(client=r, stream=stream, group=GROUP, consumer=ME,
                                      entry_id=entry_id, exc=exc, duration_ms=12.5)  # fmt: skip
                raise

        seen = plain_loop_once(r, stream, handle)

        assert isinstance(seen[entry_id], Boom)
        assert pending_ids(r, stream) == [entry_id]  # not acked: it will be delivered again
        (mine,) = records(r, stream)
        assert list(mine) == list(theirs)  # the same fields, in the same order
        assert stable(mine, VARYING_RECORD) == stable(theirs, VARYING_RECORD)
        assert mine["entry_id"] == entry_id and mine["attempt"] == "1"  # read from XPENDING
        assert mine["duration_ms"] == "12.500"
        assert mine["traceback"].endswith("Boom: review service said 503\n")
        assert theirs["traceback"].endswith("Boom: review service said 503\n")
        assert published() == [
            {"type": "failure", "stream": stream, "group": GROUP, "entry_id": entry_id}
        ]

    def test_caps_are_the_workers(self, r: redis.Redis, stream: str) -> None:
        long = "".join(f"{i:05d}" for i in range(2000))  # 10,000 chars: both caps apply

        theirs = worker_record(r, stream + ":worker", Boom(long))
        make_group(r, stream, GROUP)
        (entry_id,) = add_entries(r, stream, 1)
        r.xreadgroup(GROUP, ME, {stream: ">"})
        failed_attempt_record(client=r, stream=stream, group=GROUP, consumer=ME,
                              entry_id=entry_id, exc=Boom(long))  # fmt: skip

        (mine,) = records(r, stream)
        assert mine["message"] == theirs["message"] == long[:MAX_MESSAGE]
        assert len(mine["traceback"]) == len(theirs["traceback"]) == MAX_TRACEBACK
        assert mine["traceback"] == theirs["traceback"] == (long + "\n")[-MAX_TRACEBACK:]

    def test_attempt_is_the_delivery_count_unless_given(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, GROUP)
        (entry_id,) = add_entries(r, stream, 1)
        r.xreadgroup(GROUP, ME, {stream: ">"})
        r.xclaim(stream, GROUP, ME, 0, [entry_id])  # delivery 2
        assert entry_pending(client=r, stream=stream, group=GROUP, entry_id=entry_id) == (2, ME)
        common: dict[str, Any] = {"client": r, "stream": stream, "group": GROUP,
                                  "consumer": ME, "entry_id": entry_id,
                                  "exc": Boom("b")}  # fmt: skip

        read = failed_attempt_record(**common)
        given = failed_attempt_record(**common, attempt=7)
        r.xack(stream, GROUP, entry_id)
        gone = failed_attempt_record(**common)

        assert read is not None and given is not None and gone is not None
        assert (read.attempt, given.attempt, gone.attempt) == (2, 7, 0)
        assert [rec["attempt"] for rec in records(r, stream)] == ["2", "7", "0"]

    def test_redis_away_is_logged_not_raised(self, stream: str) -> None:
        client = redis.Redis(port=1, socket_connect_timeout=0.2)  # nothing listens there
        written = failed_attempt_record(client=client, stream=stream, group=GROUP, consumer=ME,
                                        entry_id="1-0", exc=Boom("b"))  # fmt: skip
        assert written is None


# -- Dead-lettering ---------------------------------------------------------------------------


class FailedEntryDeadLetterTests:
    def test_moves_once_acks_and_matches_the_worker(
        self, r: redis.Redis, stream: str, published: Callable[[], list[dict[str, Any]]]
    ) -> None:
        # The Worker's own move, for comparison: its last allowed delivery fails.
        theirs_stream = stream + ":worker"
        make_group(r, theirs_stream, GROUP)
        (theirs_id,) = add_entries(r, theirs_stream, 1, fields=review(3))
        fields = r.xreadgroup(GROUP, ME, {theirs_stream: ">"})[0][1][0][1]

        def fail(job: Job) -> None:
            raise Boom("no diff")

        assert process_entry(client=r, stream=theirs_stream, group=GROUP, consumer=ME,
                             entry_id=theirs_id, fields=fields, handler=fail,
                             max_deliveries=1) is Outcome.DEAD_LETTERED  # fmt: skip
        (theirs,) = dead_letters(r, theirs_stream)
        published()

        make_group(r, stream, GROUP)
        (entry_id,) = add_entries(r, stream, 1, fields=review(3))
        r.xreadgroup(GROUP, ME, {stream: ">"})
        reason = "handler failed on delivery 1 of max 1"
        common: dict[str, Any] = {"client": r, "stream": stream, "group": GROUP, "consumer": ME,
                                  "entry_id": entry_id, "reason": reason,
                                  "last_error": "Boom: no diff"}  # fmt: skip

        first = failed_entry_dead_letter(**common)
        again = failed_entry_dead_letter(**common)

        assert (first, again) == (Outcome.DEAD_LETTERED, Outcome.NOT_PENDING)
        (mine,) = dead_letters(r, stream)  # one copy, however often it is asked
        assert pending_ids(r, stream) == []  # acked in the same script
        assert list(mine) == list(theirs)
        assert stable(mine, VARYING_DLQ) == stable(theirs, VARYING_DLQ)
        assert mine["reviewId"] == "r3" and mine[ORIGIN_ID_FIELD] == entry_id
        assert set(DEAD_LETTER_FIELDS) <= set(mine)
        assert published() == [
            {"type": "dead_letter", "stream": stream, "group": GROUP, "entry_id": entry_id}
        ]

    def test_refuses_an_entry_another_consumer_holds(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, GROUP)
        (entry_id,) = add_entries(r, stream, 1)
        r.xreadgroup(GROUP, "someone-else", {stream: ">"})

        outcome = failed_entry_dead_letter(client=r, stream=stream, group=GROUP, consumer=ME,
                                           entry_id=entry_id, reason="r")  # fmt: skip

        assert outcome is Outcome.NOT_PENDING
        assert pending_ids(r, stream) == [entry_id] and dead_letters(r, stream) == []

    def test_a_missing_group_leaves_it_where_it_was(self, r: redis.Redis, stream: str) -> None:
        (entry_id,) = add_entries(r, stream, 1)
        outcome = failed_entry_dead_letter(client=r, stream=stream, group="nobody",
                                           consumer=ME, entry_id=entry_id, reason="r")  # fmt: skip
        assert outcome is Outcome.DEAD_LETTER_FAILED
        assert r.xlen(stream) == 1 and dead_letters(r, stream) == []

    def test_a_malformed_id_is_a_value_error(self, r: redis.Redis, stream: str) -> None:
        with pytest.raises(ValueError, match="not a stream id"):
            failed_entry_dead_letter(client=r, stream=stream, group=GROUP, consumer=ME,
                                     entry_id="nope", reason="r")  # fmt: skip


# -- The wrapper ------------------------------------------------------------------------------


def _wrapped_always_failing(r: redis.Redis, stream: str, max_deliveries: int) -> Any:
    def handle(fields: dict[bytes, bytes]) -> str:
        if fields.get(b"prUrl", b"").endswith(b"/666"):
            raise Boom("cannot fetch the diff")
        return "reviewed"

    return failure_recorded(handle, client=r, stream=stream, group=GROUP, consumer=ME,
                            max_deliveries=max_deliveries)  # fmt: skip


class FailureRecordedTests:
    def test_records_each_failure_and_dead_letters_on_the_last_delivery(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, GROUP)
        good, bad = add_entries(r, stream, 1, fields=review(1)) + add_entries(
            r, stream, 1, fields=review(666)
        )
        wrapped = _wrapped_always_failing(r, stream, max_deliveries=3)
        acked: list[str] = []

        def handle(entry_id: str, fields: dict[bytes, bytes]) -> Any:
            result = wrapped(entry_id, fields)
            acked.append(entry_id)  # the loop acks whatever returned
            return result

        passes = [plain_loop_once(r, stream, handle) for _ in range(3)]

        assert passes[0][good] == "reviewed"
        for n in (0, 1):  # deliveries 1 and 2: re-raised, so the loop did not ack
            assert isinstance(passes[n][bad], Boom)
        assert passes[2][bad] is Outcome.DEAD_LETTERED
        assert acked == [good, bad]  # bad only once it was moved (and acked) by the script
        assert pending_ids(r, stream) == []
        (moved,) = dead_letters(r, stream)
        assert moved[ORIGIN_ID_FIELD] == bad and moved[DELIVERIES_FIELD] == "3"
        assert moved[REASON_FIELD] == "handler failed on delivery 3 of max 3"
        assert moved[LAST_ERROR_FIELD] == "Boom: cannot fetch the diff"
        assert [(f["entry_id"], f["attempt"]) for f in records(r, stream)] == [
            (bad, "1"), (bad, "2"), (bad, "3")
        ]  # fmt: skip
        assert plain_loop_once(r, stream, handle) == {}  # nothing left to deliver

    def test_a_permanent_failure_is_dead_lettered_at_once(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, GROUP)
        (entry_id,) = add_entries(r, stream, 1)

        def handle(fields: dict[bytes, bytes]) -> None:
            raise PermanentFailure("reviewId is not a number")

        wrapped = failure_recorded(handle, client=r, stream=stream, group=GROUP, consumer=ME)
        seen = plain_loop_once(r, stream, wrapped)

        assert seen == {entry_id: Outcome.DEAD_LETTERED}
        (moved,) = dead_letters(r, stream)
        assert moved[REASON_FIELD] == "permanent failure: reviewId is not a number"

    def test_a_refused_move_re_raises_so_the_loop_cannot_ack(
        self, r: redis.Redis, stream: str
    ) -> None:
        # Too wide for one script: the move is refused and nothing changes.
        make_group(r, stream, GROUP)
        (entry_id,) = add_entries(r, stream, 1, fields={f"f{i}": "v" for i in range(4000)})
        wrapped = _wrapped_always_failing(r, stream, max_deliveries=1)

        def handle(entry_id: str, fields: dict[bytes, bytes]) -> Any:
            return wrapped(entry_id, {b"prUrl": b"https://x/666"})

        seen = plain_loop_once(r, stream, handle)

        assert isinstance(seen[entry_id], Boom)  # the handler's own error, re-raised
        assert pending_ids(r, stream) == [entry_id] and dead_letters(r, stream) == []
        (record,) = records(r, stream)
        assert record["attempt"] == "1"

    def test_an_entry_taken_by_another_consumer_mid_handler_is_not_acked(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, GROUP)
        (entry_id,) = add_entries(r, stream, 1)

        def handle(fields: dict[bytes, bytes]) -> None:
            # A slow handler: another worker's reclaim sweep takes the entry meanwhile.
            r.xclaim(stream, GROUP, "other", 0, [entry_id])
            raise Boom("timed out")

        wrapped = failure_recorded(handle, client=r, stream=stream, group=GROUP, consumer=ME,
                                   max_deliveries=1)  # fmt: skip
        seen = plain_loop_once(r, stream, wrapped)

        assert isinstance(seen[entry_id], Boom)
        assert entry_pending(client=r, stream=stream, group=GROUP, entry_id=entry_id) == (
            2, "other"
        )  # fmt: skip
        assert dead_letters(r, stream) == []

    def test_a_malformed_id_fails_before_the_handler_runs(
        self, r: redis.Redis, stream: str
    ) -> None:
        ran: list[str] = []
        wrapped = failure_recorded(ran.append, client=r, stream=stream, group=GROUP, consumer=ME)
        with pytest.raises(ValueError, match="not a stream id"):
            wrapped("nope", "x")
        assert ran == []

    def test_round_trips_are_what_the_docstring_says(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        """Nothing on success; XPENDING, the record and its event on a failure; the script
        and its event on top when the entry is moved."""
        client = CountingRedis(connection_pool=redis.ConnectionPool.from_url(redis_url))
        make_group(r, stream, GROUP)
        (entry_id,) = add_entries(r, stream, 1)
        r.xreadgroup(GROUP, ME, {stream: ">"})
        fail = [True]

        def handle() -> None:
            if fail[0]:
                raise Boom("b")

        wrapped = failure_recorded(handle, client=client, stream=stream, group=GROUP,
                                   consumer=ME, max_deliveries=2)  # fmt: skip
        costs = []
        for failing in (False, True):
            fail[0] = failing
            client.round_trips = 0
            with contextlib.suppress(Boom):
                wrapped(entry_id)
            costs.append(client.round_trips)
        r.xclaim(stream, GROUP, ME, 0, [entry_id])  # delivery 2: the last
        r.script_load(DEAD_LETTER.registered(r).script)  # loaded once per server, not counted
        client.round_trips = 0
        assert wrapped(entry_id) is Outcome.DEAD_LETTERED
        costs.append(client.round_trips)

        assert costs == [0, 3, 5]
        client.connection_pool.disconnect()

    def test_max_deliveries_is_checked(self, r: redis.Redis, stream: str) -> None:
        with pytest.raises(ValueError, match="at least 1"):
            failure_recorded(print, client=r, stream=stream, group=GROUP, consumer=ME,
                             max_deliveries=0)  # fmt: skip


# -- asyncio twins ---------------------------------------------------------------------------


class AsyncTwinTests:
    async def test_the_workshop_loop_with_the_async_wrapper(
        self,
        r: redis.Redis,
        ar: redis.asyncio.Redis,
        stream: str,
        published: Callable[[], list[dict[str, Any]]],
    ) -> None:
        make_group(r, stream, GROUP)
        (good,) = add_entries(r, stream, 1, fields=review(1))
        (bad,) = add_entries(r, stream, 1, fields=review(666))

        async def handler(fields: dict[str, str]) -> None:  # decoded, as in the workshop
            if fields["prUrl"].endswith("/666"):
                raise Boom("cannot fetch the diff")

        wrapped = failure_recorded_async(handler, client=ar, stream=stream, group=GROUP,
                                         consumer=ME, max_deliveries=2)  # fmt: skip
        acked: list[str] = []

        async def handle(entry_id: str, fields: dict[str, str]) -> Any:
            result = await wrapped(entry_id, fields)
            acked.append(entry_id)
            return result

        first = await plain_loop_once_async(ar, stream, handle)
        second = await plain_loop_once_async(ar, stream, handle)

        assert first[good] is None and isinstance(first[bad], Boom)
        assert second == {bad: Outcome.DEAD_LETTERED}
        assert acked == [good, bad] and pending_ids(r, stream) == []
        (moved,) = dead_letters(r, stream)
        assert moved[ORIGIN_ID_FIELD] == bad and moved["prUrl"].endswith("/666")
        assert [(f["entry_id"], f["attempt"]) for f in records(r, stream)] == [
            (bad, "1"), (bad, "2")
        ]  # fmt: skip
        assert published() == [
            {"type": "failure", "stream": stream, "group": GROUP, "entry_id": bad},
            {"type": "failure", "stream": stream, "group": GROUP, "entry_id": bad},
            {"type": "dead_letter", "stream": stream, "group": GROUP, "entry_id": bad},
        ]

    async def test_the_twins_write_what_the_sync_calls_write(
        self, r: redis.Redis, ar: redis.asyncio.Redis, stream: str
    ) -> None:
        """Same calls, one stream each: the same records, the same dead letters."""
        sync_stream, async_stream = stream + ":sync", stream + ":async"
        ids = {}
        for name in (sync_stream, async_stream):
            make_group(r, name, GROUP)
            ids[name] = add_entries(r, name, 1, fields=review(5))[0]
            r.xreadgroup(GROUP, ME, {name: ">"})
        exc = Boom("same error")
        for name, is_async in ((sync_stream, False), (async_stream, True)):
            record: dict[str, Any] = {
                "stream": name,
                "group": GROUP,
                "consumer": ME,
                "entry_id": ids[name],
                "exc": exc,
                "duration_ms": 3.0,
            }
            dead: dict[str, Any] = {"stream": name, "group": GROUP, "consumer": ME,
                                    "entry_id": ids[name], "reason": "given up",
                                    "last_error": "Boom: same error"}  # fmt: skip
            if is_async:
                assert await failed_attempt_record_async(client=ar, **record) is not None
                outcomes = [await failed_entry_dead_letter_async(client=ar, **dead)
                            for _ in range(2)]  # fmt: skip
            else:
                assert failed_attempt_record(client=r, **record) is not None
                outcomes = [failed_entry_dead_letter(client=r, **dead) for _ in range(2)]
            assert outcomes == [Outcome.DEAD_LETTERED, Outcome.NOT_PENDING]

        (sync_record,) = records(r, sync_stream)
        (async_record,) = records(r, async_stream)
        assert stable(sync_record, VARYING_RECORD - {"duration_ms"}) == stable(
            async_record, VARYING_RECORD - {"duration_ms"}
        )
        assert sync_record["traceback"] == async_record["traceback"]  # one exception object
        (sync_dlq,) = dead_letters(r, sync_stream)
        (async_dlq,) = dead_letters(r, async_stream)
        assert list(sync_dlq) == list(async_dlq)
        assert stable(sync_dlq, VARYING_DLQ) == stable(async_dlq, VARYING_DLQ)

    async def test_refusals_read_the_same_on_both(
        self, r: redis.Redis, ar: redis.asyncio.Redis, stream: str
    ) -> None:
        make_group(r, stream, GROUP)
        held, wide = add_entries(r, stream, 1) + add_entries(
            r, stream, 1, fields={f"f{i}": "v" for i in range(4000)}
        )
        r.xreadgroup(GROUP, "someone-else", {stream: ">"}, count=1)
        r.xreadgroup(GROUP, ME, {stream: ">"}, count=1)
        cases = [(held, GROUP, Outcome.NOT_PENDING), (wide, GROUP, Outcome.DEAD_LETTER_FAILED),
                 (wide, "nobody", Outcome.DEAD_LETTER_FAILED)]  # fmt: skip
        for entry_id, group, expected in cases:
            common: dict[str, Any] = {"stream": stream, "group": group, "consumer": ME,
                                      "entry_id": entry_id, "reason": "r"}  # fmt: skip
            assert failed_entry_dead_letter(client=r, **common) is expected
            assert await failed_entry_dead_letter_async(client=ar, **common) is expected
        assert sorted(pending_ids(r, stream)) == sorted([held, wide])
        assert dead_letters(r, stream) == []

    async def test_cancellation_is_not_a_failure(
        self, r: redis.Redis, ar: redis.asyncio.Redis, stream: str
    ) -> None:
        import asyncio

        make_group(r, stream, GROUP)
        (entry_id,) = add_entries(r, stream, 1)
        r.xreadgroup(GROUP, ME, {stream: ">"})

        async def handler() -> None:
            raise asyncio.CancelledError

        wrapped = failure_recorded_async(handler, client=ar, stream=stream, group=GROUP,
                                         consumer=ME, max_deliveries=1)  # fmt: skip
        with pytest.raises(asyncio.CancelledError):
            await wrapped(entry_id)
        assert records(r, stream) == [] and pending_ids(r, stream) == [entry_id]


# -- No Django, and the example ---------------------------------------------------------------


class ImportTests:
    def test_the_public_api_imports_without_django(self) -> None:
        code = (
            "import sys, queue_core\n"
            "assert queue_core.failure_recorded_async\n"
            "print('django' in sys.modules)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).parents[2])  # fmt: skip
        assert out.stdout.strip() == "False"


class ExampleTests:
    def test_the_adapted_workshop_worker_runs_as_documented(
        self, r: redis.Redis, redis_url: str, prefix: str
    ) -> None:
        """``examples/foreign_worker.py``, run as docs/worker.md says, on a stream of its own."""
        stream = prefix + "reviews:queue"
        argv = ["--url", redis_url, "--stream", stream, "--seed", "3", "--max-deliveries", "2",
                "--reclaim-idle-ms", "0", "--until-idle", "--consumer", "w-example"]  # fmt: skip
        out = subprocess.run([sys.executable, "-m", "examples.foreign_worker", *argv],
                             capture_output=True, text=True, timeout=60,
                             cwd=Path(__file__).parents[2])  # fmt: skip

        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines()[-1] == "acked=2 failed=1 dead_lettered=1"
        assert pending_ids(r, stream, "reviewers") == []
        (moved,) = dead_letters(r, stream)
        assert moved["reviewId"] == "r0" and moved[DELIVERIES_FIELD] == "2"
        assert moved[LAST_ERROR_FIELD].startswith("RuntimeError: could not fetch the diff")
        assert [(f["attempt"], f["consumer"], f["error_type"]) for f in records(r, stream)] == [
            ("1", "w-example", "RuntimeError"), ("2", "w-example", "RuntimeError")
        ]  # fmt: skip
