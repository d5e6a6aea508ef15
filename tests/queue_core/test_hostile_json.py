"""Hostile JSON in every key queue_core reads, on real Redis: each reader skips or flags it,
none raises, and a worker whose group's pause key and heartbeat hash hold it keeps
running (paused, as an unreadable pause must) and logs a few lines, not a flood.

Entry points and inputs (hypothesis ``max_examples``): the pause key (``pause_read``, 60),
the heartbeat hash (``heartbeats_read``, the worker's prune in ``heartbeat_send`` and
the retire dry run's ``idle_consumers_find``, 60), the edited-replay records
(``edited_replays_read``, ``edited_replays_settle``, 60; the sweeper's loop), a
job's field (``Job.json``, 60), payload search's stored values and typed value and
path (``search_query``, ``stream_search``, 60).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_core import payload_search
from queue_core.admin import idle_consumers_find
from queue_core.control import (
    UNREADABLE_PAUSE,
    Heartbeat,
    heartbeat_send,
    heartbeats_read,
    pause_clear,
    pause_read,
)
from queue_core.edited_replays import (
    edited_replays_read,
    edited_replays_settle,
    edited_replays_sweeper,
)
from queue_core.jobs import Job, PermanentFailure
from queue_core.keys import stream_keys
from tests.factories import add_entries
from tests.hostile_json import deep_documents, hostile_json
from tests.queue_core.worker.helpers import new_worker, running, wait_until

#: About parsing, not the server: on the run's engine only (each example is a few commands).
pytestmark = pytest.mark.one_engine
FIXTURES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
NOW_MS = 1_800_000_000_000


def beat(consumer: str, seen_ms: int = NOW_MS) -> Heartbeat:
    return Heartbeat(
        consumer=consumer, host="h", pid=1, version="v", concurrency=1, running=0,
        buffered=0, processed=0, failed=0, started_ms=seen_ms, seen_ms=seen_ms,
        paused=False, pause_at_ms=None,
    )  # fmt: skip


class PauseKeyTests:
    @FIXTURES
    @given(value=hostile_json())
    def test_a_hostile_pause_reads_as_a_pause_or_unreadable(
        self, r: redis.Redis, stream: str, value: str
    ) -> None:
        r.set(stream_keys(stream).pause("g"), value)
        pause = pause_read(client=r, stream=stream, group="g")
        assert pause is not None  # something is there: it still pauses
        assert pause == UNREADABLE_PAUSE or isinstance(pause.by, str)


class HeartbeatHashTests:
    @FIXTURES
    @given(value=hostile_json())
    def test_a_hostile_heartbeat_is_skipped_by_every_reader(
        self, r: redis.Redis, stream: str, value: str
    ) -> None:
        key = stream_keys(stream).workers("g")
        r.delete(key)
        r.hset(key, mapping={"stranger": value, "w1": beat("w1").to_json()})
        assert [b.consumer for b in heartbeats_read(client=r, stream=stream, group="g")] == ["w1"]
        heartbeat_send(client=r, stream=stream, group="g", beat=beat("w2"),
                       prune_before_ms=NOW_MS + 1)  # fmt: skip
        assert r.hexists(key, "stranger")  # what cannot be read is left alone, not pruned
        if not r.exists(stream):
            r.xgroup_create(stream, "g", id="0", mkstream=True)
        idle_consumers_find(client=r, stream=stream, group="g", idle_ms=0, now_ms=NOW_MS)


class EditedReplayRecordTests:
    @FIXTURES
    @given(value=hostile_json())
    def test_a_hostile_record_is_skipped(self, r: redis.Redis, stream: str, value: str) -> None:
        # (Not the sweep: its index is one key for every stream, shared by parallel tests.)
        r.xadd(stream, {"a": "1"})
        r.hset(stream_keys(stream).dlq_edits, "1-1", value)
        found = edited_replays_read(client=r, stream=stream, dlq_ids=["1-1"])
        assert set(found) <= {"1-1"}
        assert edited_replays_settle(r, stream) >= 0

    def test_the_sweeper_survives_a_sweep_that_raises(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        calls: list[int] = []

        def sweep(client: object) -> int:
            calls.append(1)
            raise RecursionError("something nobody expected")

        monkeypatch.setattr("queue_core.edited_replays.edited_replays_sweep", sweep)
        stopping = threading.Event()
        thread = threading.Thread(
            target=edited_replays_sweeper, args=(lambda: None, stopping), kwargs={"every_s": 0.01}
        )
        with caplog.at_level(logging.DEBUG, logger="ackboard.edited_replays"):
            thread.start()
            wait_until(lambda: len(calls) >= 5, what="five sweeps")
            stopping.set()
            thread.join(5)
        assert not thread.is_alive()
        tracebacks = [rec for rec in caplog.records if rec.exc_info]
        assert len(tracebacks) == 1  # once, then a debug line per sweep


class JobFieldTests:
    @settings(max_examples=60, deadline=None)
    @given(value=hostile_json())
    def test_a_hostile_payload_is_a_permanent_failure_or_its_value(self, value: str) -> None:
        job = Job(stream="s", group="g", id="1-1", fields={"payload": value},
                  delivery_count=1, consumer="c")  # fmt: skip
        try:
            job.json()
        except PermanentFailure as exc:
            assert "not valid JSON" in str(exc)

    def test_the_depth_is_the_jobs_own_and_can_be_raised(self) -> None:
        job = Job(stream="s", group="g", id="1-1", fields={"payload": "[" * 513 + "]" * 513},
                  delivery_count=1, consumer="c")  # fmt: skip
        with pytest.raises(PermanentFailure, match="nested deeper than 512 levels"):
            job.json()
        assert job.json(max_depth=600) is not None


class PayloadSearchTests:
    @FIXTURES
    @given(stored=hostile_json(), typed=hostile_json(), key=st.text(max_size=20))
    def test_hostile_values_and_queries_never_raise_past_value_error(
        self, r: redis.Redis, stream: str, stored: str, typed: str, key: str
    ) -> None:
        r.delete(stream)
        r.xadd(stream, {"payload": stored})
        r.xadd(stream, {"payload": '{"a": 1}'})
        queries = [payload_search.search_query(field="payload", op="json", value="1", path="$")]
        path = "$[" + json.dumps(key) + "]"
        with contextlib.suppress(ValueError):  # a 400 for the page
            queries.append(
                payload_search.search_query(field="payload", op="json", value=typed, path=path)
            )
        for query in queries:
            # A budget no busy machine runs out of: what is checked is that the search
            # finishes without raising, not how fast (the time stop has its own tests).
            found = payload_search.stream_search(client=r, stream=stream, query=query,
                                                 max_ms=600_000)  # fmt: skip
            assert found.done, found.stopped_by

    @pytest.mark.parametrize("depth", [65, 1000, 1500, 4999])  # at most 10,000 characters
    def test_a_deep_value_to_match_is_refused_clearly(self, depth: int) -> None:
        with pytest.raises(ValueError, match="the value to match is JSON nested deeper"):
            payload_search.search_query(
                field="p", op="json", value="[" * depth + "]" * depth, path="$"
            )


class WorkerTests:
    """A worker among hostile control keys: it keeps running, pauses (an unreadable pause
    pauses) and logs a few lines; a resume lets it work again."""

    def test_a_deep_pause_and_a_deep_heartbeat_pause_the_worker_quietly(
        self, r: redis.Redis, redis_url: str, stream: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        keys = stream_keys(stream)
        deep = "[" * 5000 + "]" * 5000
        r.set(keys.pause("g"), deep)
        r.hset(keys.workers("g"), "stranger", '{"seen_ms": ' + "[" * 5000)
        seen: list[str] = []
        worker = new_worker(redis_url, stream, lambda job: seen.append(job.id),
                            heartbeat_ms=200)  # fmt: skip
        with caplog.at_level(logging.INFO), running(worker):
            add_entries(r, stream, 2)
            wait_until(lambda: (b := heartbeats_read(client=r, stream=stream, group="g"))
                       and b[0].confirms(UNREADABLE_PAUSE), what="the confirmation")  # fmt: skip
            # Several more exchanges (a beat every 0.2 s, a pause check every 0.2 s).
            first = heartbeats_read(client=r, stream=stream, group="g")[0].seen_ms
            wait_until(lambda: heartbeats_read(client=r, stream=stream, group="g")[0].seen_ms
                       > first, what="another heartbeat")  # fmt: skip
            assert seen == []
            pause_clear(client=r, stream=stream, group="g")
            wait_until(lambda: len(seen) == 2, what="the entries after resume")
        lines = [rec for rec in caplog.records if rec.name.startswith(("queue_core", "asyncio"))]
        assert not any("never retrieved" in rec.getMessage() for rec in lines)
        assert not any(rec.exc_info for rec in lines)
        unreadable = [rec for rec in lines if "not a readable pause" in rec.getMessage()]
        assert len(unreadable) == 1
        assert len(lines) < 15, [rec.getMessage() for rec in lines]

    def test_an_exchange_that_raises_is_logged_once_and_retried_not_spun(
        self, redis_url: str, stream: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture,
    ) -> None:  # fmt: skip
        calls: list[int] = []

        def broken(self: object, client: object, beat: object, *, prune: bool) -> None:
            calls.append(1)
            raise RuntimeError("a reader nobody guarded")

        monkeypatch.setattr("queue_core.worker.heartbeat.ControlLink.exchange", broken)
        seen: list[str] = []
        worker = new_worker(redis_url, stream, lambda job: seen.append(job.id))
        with caplog.at_level(logging.INFO), running(worker):
            wait_until(lambda: len(calls) >= 4, what="four exchanges")
        lines = [rec for rec in caplog.records if rec.name.startswith(("queue_core", "asyncio"))]
        assert not any("never retrieved" in rec.getMessage() for rec in lines)
        # Once while running, once for the last heartbeat at the stop.
        assert len([rec for rec in lines if rec.exc_info]) == 2
        # One exchange per pause check (0.5 s), not one per turn of the loop.
        assert len(calls) < 20


def test_deep_documents_reach_far_past_pythons_limit() -> None:
    """The strategy draws what used to raise RecursionError (a check of the tests' reach)."""
    found = []

    @settings(max_examples=200, deadline=None)
    @given(deep_documents())
    def collect(text: str) -> None:
        found.append(text.count("[") + text.count("{"))

    collect()
    assert max(found) >= 1000
