"""queue_core.control: the pause key, the heartbeat hash, and the pure fleet_state rules.

The Redis tests run on the private server (both engines); the fleet_state and parsing
tests are pure. Workers honouring the pause are tested in tests/integration/test_pause.py.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from queue_core.connection import Client
from queue_core.control import (
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_KEEP_MS,
    HEARTBEAT_STALE_MS,
    UNREADABLE_PAUSE,
    Heartbeat,
    Pause,
    ackboard_version,
    fleet_state,
    heartbeat_send,
    heartbeats_read,
    pause_clear,
    pause_read,
    pause_set,
)
from queue_core.keys import stream_keys
from queue_core.types import ConsumerInfo
from queue_core.worker import WorkerConfig, WorkerConfigError
from queue_core.worker.heartbeat import ControlLink
from tests.factories import add_entries
from tests.queue_core.worker.helpers import new_worker, running, wait_until

NOW = 1_800_000_000_000
PAUSE = Pause(by="ops-oncall", reason="deploy", at_ms=NOW - 5_000, until_ms=None)


def beat(consumer: str, **fields: Any) -> Heartbeat:
    values: dict[str, Any] = {
        "consumer": consumer, "host": "h", "pid": 1, "version": "0.1.0", "concurrency": 4,
        "running": 0, "buffered": 0, "processed": 0, "failed": 0, "started_ms": NOW - 60_000,
        "seen_ms": NOW - 1_000, "paused": False, "pause_at_ms": None,
    }  # fmt: skip
    return Heartbeat(**(values | fields))


def consumer(name: str, idle_ms: int, pending: int = 0) -> ConsumerInfo:
    return ConsumerInfo(name=name, pending=pending, idle_ms=idle_ms, inactive_ms=None)


def state(**kwargs: Any) -> Any:
    defaults: dict[str, Any] = {
        "pause": PAUSE, "heartbeats": [], "consumers": [], "now_ms": NOW, "seen_within_ms": 60_000,
    }  # fmt: skip
    return fleet_state(**(defaults | kwargs))


class FleetStateTests:
    def test_confirmed_counts_only_live_workers_confirming_this_pause(self) -> None:
        beats = [
            beat("a", paused=True, pause_at_ms=PAUSE.at_ms),
            beat("b", paused=True, pause_at_ms=PAUSE.at_ms - 60_000),  # an earlier pause
            beat("c", paused=False),  # still reading
            beat("d", paused=True, pause_at_ms=PAUSE.at_ms, seen_ms=NOW - 20_000),  # stale
            beat("e", paused=True, pause_at_ms=PAUSE.at_ms),
        ]
        fleet = state(heartbeats=beats)
        assert fleet.confirmed == 2
        assert [b.consumer for b in fleet.live] == ["a", "b", "c", "e"]
        assert [b.consumer for b in fleet.workers] == ["a", "b", "c", "d", "e"]
        assert not fleet.all_confirmed

    def test_all_confirmed_when_every_live_worker_confirms(self) -> None:
        beats = [
            beat("a", paused=True, pause_at_ms=PAUSE.at_ms),
            beat("b", paused=False, seen_ms=NOW - HEARTBEAT_STALE_MS - 1),  # stale: not asked
        ]
        fleet = state(heartbeats=beats)
        assert (fleet.confirmed, len(fleet.live), fleet.all_confirmed) == (1, 1, True)

    def test_liveness_boundary_is_the_stale_threshold(self) -> None:
        edge = beat("a", seen_ms=NOW - HEARTBEAT_STALE_MS)
        assert edge.live(NOW) and not edge.live(NOW + 1)

    def test_finishing_is_running_plus_buffered_over_live_workers_while_paused(self) -> None:
        beats = [
            beat("a", running=2, buffered=3, paused=True, pause_at_ms=PAUSE.at_ms),
            beat("b", running=1, buffered=0),
            beat("old", running=7, buffered=7, seen_ms=NOW - 60_000),
        ]
        assert state(heartbeats=beats).finishing == 6
        not_paused = state(pause=None, heartbeats=beats)
        assert (not_paused.finishing, not_paused.confirmed, not_paused.paused) == (0, 0, False)

    def test_not_pausable_names_recent_consumers_without_a_live_heartbeat(self) -> None:
        beats = [beat("worker-1"), beat("worker-gone", seen_ms=NOW - 30_000)]
        consumers = [
            consumer("worker-1", idle_ms=100),  # an Ackboard worker: pausable
            consumer("legacy-b", idle_ms=500),
            consumer("legacy-a", idle_ms=60_000),  # at the threshold: still seen
            consumer("long-dead", idle_ms=60_001),
            consumer("worker-gone", idle_ms=2_000),  # its heartbeat is stale
            consumer("ackboard-operator", idle_ms=10),  # operator claims: no worker
            consumer("ackboard-retired", idle_ms=10),  # retire's parking place: no worker
        ]
        fleet = state(heartbeats=beats, consumers=consumers)
        assert fleet.not_pausable == ("legacy-a", "legacy-b", "worker-gone")
        # Not paused: the same consumers, the same answer (the page may show it anyway).
        assert state(pause=None, heartbeats=beats, consumers=consumers).not_pausable == (
            "legacy-a", "legacy-b", "worker-gone",
        )  # fmt: skip

    def test_a_stopped_heartbeat_is_not_live_at_once(self) -> None:
        # w1 stopped a second ago after confirming the pause with work in hand: it counts
        # for nothing, although its last heartbeat is as fresh as w2's.
        stopped = beat("w1", paused=True, pause_at_ms=PAUSE.at_ms, running=2, buffered=1,
                       stopped_ms=NOW - 1_000)  # fmt: skip
        running_ = beat("w2", paused=True, pause_at_ms=PAUSE.at_ms)
        assert stopped.stopped and not stopped.live(NOW) and not stopped.live(NOW - 1_000)
        assert running_.live(NOW) and not running_.stopped
        consumers = [consumer("w1", idle_ms=1_000), consumer("w2", idle_ms=100)]
        fleet = state(heartbeats=[stopped, running_], consumers=consumers)
        assert [b.consumer for b in fleet.workers] == ["w1", "w2"]
        assert [b.consumer for b in fleet.live] == ["w2"]
        assert (fleet.confirmed, fleet.finishing, fleet.all_confirmed) == (1, 0, True)
        # Seen a second ago by XINFO, but its heartbeat says it stopped: not "not pausable".
        assert fleet.not_pausable == ()
        # The same consumer with a stale heartbeat that does not say so is not pausable.
        stale = beat("w1", seen_ms=NOW - HEARTBEAT_STALE_MS - 1)
        assert state(heartbeats=[stale, running_], consumers=consumers).not_pausable == ("w1",)

    def test_a_heartbeat_without_the_stopped_field_is_judged_by_its_age(self) -> None:
        # What workers older than the field write: no "stopped_ms" at all.
        for seen_ms, live in [(NOW - 1_000, True), (NOW - HEARTBEAT_STALE_MS - 1, False)]:
            old = json.loads(beat("w", seen_ms=seen_ms).to_json())
            assert "stopped_ms" not in old
            parsed = Heartbeat.from_json("w", json.dumps(old))
            assert parsed is not None and parsed.stopped_ms is None and not parsed.stopped
            assert parsed.live(NOW) is live
            assert [b.consumer for b in state(heartbeats=[parsed]).live] == (["w"] if live else [])
            null = Heartbeat.from_json("w", json.dumps(old | {"stopped_ms": None}))
            assert null == parsed

    def test_a_pause_past_its_auto_resume_time_is_no_pause(self) -> None:
        timed = replace(PAUSE, until_ms=NOW)
        beats = [beat("a", paused=True, pause_at_ms=PAUSE.at_ms, running=1)]
        fleet = state(pause=timed, heartbeats=beats)
        assert (fleet.pause, fleet.confirmed, fleet.finishing) == (None, 0, 0)
        assert state(pause=replace(PAUSE, until_ms=NOW + 1), heartbeats=beats).confirmed == 1


class ParsingTests:
    def test_heartbeat_round_trips(self) -> None:
        one = beat("w", paused=True, pause_at_ms=5, processed=10, failed=2)
        assert Heartbeat.from_json("w", one.to_json()) == one
        assert Heartbeat.from_json("w", one.to_json().encode()) == one

    def test_a_stopped_heartbeat_round_trips_and_a_running_one_has_no_stopped_field(
        self,
    ) -> None:
        stopped = beat("w", seen_ms=NOW, stopped_ms=NOW)
        assert json.loads(stopped.to_json())["stopped_ms"] == NOW
        assert Heartbeat.from_json("w", stopped.to_json()) == stopped
        assert "stopped_ms" not in json.loads(beat("w").to_json())

    def test_the_field_name_is_the_consumer(self) -> None:
        assert Heartbeat.from_json("field-name", beat("inside").to_json()) == beat("field-name")

    @pytest.mark.parametrize(
        "raw",
        [
            b"not json",
            b"\xff\xfe",
            b"[1, 2]",
            b"null",
            json.dumps({k: v for k, v in json.loads(beat("w").to_json()).items() if k != "pid"}),
            beat("w").to_json().replace('"pid":1', '"pid":"1"'),
            beat("w").to_json().replace('"pid":1', '"pid":true'),
            beat("w").to_json().replace('"paused":false', '"paused":0'),
            beat("w").to_json().replace('"pause_at_ms":null', '"pause_at_ms":"x"'),
            beat("w", stopped_ms=5).to_json().replace('"stopped_ms":5', '"stopped_ms":"5"'),
            beat("w", stopped_ms=5).to_json().replace('"stopped_ms":5', '"stopped_ms":true'),
        ],
    )
    def test_a_malformed_heartbeat_is_none(self, raw: str | bytes) -> None:
        assert Heartbeat.from_json("w", raw) is None

    def test_pause_round_trips(self) -> None:
        timed = replace(PAUSE, until_ms=NOW + 1)
        assert Pause.from_json(timed.to_json()) == timed
        assert Pause.from_json(PAUSE.to_json().encode()) == PAUSE

    @pytest.mark.parametrize("raw", [b"garbage", b"\xff", b"[]", b"42", b'"paused"'])
    def test_an_unreadable_pause_still_pauses(self, raw: bytes) -> None:
        pause = Pause.from_json(raw)
        assert pause == UNREADABLE_PAUSE
        assert pause.active(NOW) and pause.reason == "(unreadable)"

    def test_a_pause_keeps_what_it_can_read(self) -> None:
        raw = json.dumps({"by": "ops", "reason": 7, "at_ms": "x", "until_ms": True})
        assert Pause.from_json(raw) == Pause(
            by="ops", reason="(unreadable)", at_ms=0, until_ms=None
        )
        assert Pause.from_json("{}") == Pause(
            by="(unknown)", reason="(unreadable)", at_ms=0, until_ms=None
        )

    def test_version_is_the_projects(self) -> None:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        with pyproject.open("rb") as f:
            assert ackboard_version() == tomllib.load(f)["project"]["version"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def next_event(pubsub: redis.client.PubSub, stream: str) -> dict[str, Any]:
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.2)
        if message and message["type"] == "message":
            event: dict[str, Any] = json.loads(message["data"])
            if event["stream"] == stream:
                return event
    raise AssertionError("no event published")


class PauseKeyTests:
    def test_set_read_clear(self, r: redis.Redis, stream: str, events: redis.client.PubSub) -> None:
        assert pause_read(client=r, stream=stream, group="g") is None
        now = now_ms()
        written = pause_set(client=r, stream=stream, group="g", by="ops-oncall",
                            reason="  deploy  ", until_ms=None, now_ms=now)  # fmt: skip
        assert written == Pause(by="ops-oncall", reason="deploy", at_ms=now, until_ms=None)
        assert next_event(events, stream) == {
            "type": "action", "stream": stream, "group": "g", "action": "pause", "ids": [],
        }  # fmt: skip
        key = stream_keys(stream).pause("g")
        assert json.loads(r.get(key)) == {
            "by": "ops-oncall", "reason": "deploy", "at_ms": now, "until_ms": None,
        }  # fmt: skip
        assert r.pttl(key) == -1  # no auto-resume: no expiry
        assert pause_read(client=r, stream=stream, group="g") == written
        assert pause_read(client=r, stream=stream, group="other") is None

        assert pause_clear(client=r, stream=stream, group="g") == written
        assert next_event(events, stream)["action"] == "resume"
        assert r.exists(key) == 0
        assert pause_clear(client=r, stream=stream, group="g") is None  # twice is harmless

    def test_auto_resume_sets_pxat(self, r: redis.Redis, stream: str) -> None:
        now = now_ms()
        pause_set(client=r, stream=stream, group="g", by="ops", reason="r",
                  until_ms=now + 60_000, now_ms=now)  # fmt: skip
        ttl = r.pttl(stream_keys(stream).pause("g"))
        assert 55_000 < ttl <= 60_000
        pause_set(client=r, stream=stream, group="g", by="ops", reason="r",
                  until_ms=now_ms() + 300, now_ms=now_ms())  # fmt: skip
        assert pause_read(client=r, stream=stream, group="g") is not None
        # Redis drops it at its PXAT.
        wait_until(lambda: pause_read(client=r, stream=stream, group="g") is None,
                   what="Redis to drop the pause")  # fmt: skip

    def test_a_pause_past_until_without_pxat_reads_as_none_given_now(
        self, r: redis.Redis, stream: str
    ) -> None:
        stale = Pause(by="ops", reason="r", at_ms=1, until_ms=2)
        r.set(stream_keys(stream).pause("g"), stale.to_json())
        assert pause_read(client=r, stream=stream, group="g") == stale
        assert pause_read(client=r, stream=stream, group="g", now_ms=now_ms()) is None

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"reason": "   "}, "a reason is required"),
            ({"until_ms": NOW}, "auto-resume time must be in the future"),
            ({"until_ms": NOW - 1}, "auto-resume time must be in the future"),
            ({"by": ""}, "by must be a non-empty string"),
            ({"group": ""}, "group must be a non-empty string"),
        ],
    )
    def test_bad_input_is_a_clear_error_and_writes_nothing(
        self, r: redis.Redis, stream: str, kwargs: dict[str, Any], message: str
    ) -> None:
        args: dict[str, Any] = {"stream": stream, "group": "g", "by": "ops", "reason": "r",
                                "until_ms": None, "now_ms": NOW}  # fmt: skip
        with pytest.raises(ValueError, match=message):
            pause_set(client=r, **(args | kwargs))
        assert pause_read(client=r, stream=stream, group="g") is None

    def test_someone_elses_junk_is_an_unreadable_pause(self, r: redis.Redis, stream: str) -> None:
        key = stream_keys(stream).pause("g")
        r.set(key, b"\xff not json")
        assert pause_read(client=r, stream=stream, group="g") == UNREADABLE_PAUSE
        assert pause_clear(client=r, stream=stream, group="g") == UNREADABLE_PAUSE
        r.hset(key, "x", "y")  # a key of another type
        assert pause_read(client=r, stream=stream, group="g") == UNREADABLE_PAUSE
        assert pause_clear(client=r, stream=stream, group="g") == UNREADABLE_PAUSE
        assert r.exists(key) == 0


class HeartbeatKeyTests:
    def test_send_writes_the_field_renews_the_ttl_and_reads_the_pause(
        self, r: redis.Redis, stream: str
    ) -> None:
        key = stream_keys(stream).workers("g")
        one = beat("w1", seen_ms=now_ms())
        assert heartbeat_send(client=r, stream=stream, group="g", beat=one) is None
        assert HEARTBEAT_KEEP_MS - 5_000 < r.pttl(key) <= HEARTBEAT_KEEP_MS
        assert heartbeats_read(client=r, stream=stream, group="g") == [one]
        written = pause_set(client=r, stream=stream, group="g", by="ops", reason="r",
                            until_ms=None, now_ms=now_ms())  # fmt: skip
        assert heartbeat_send(client=r, stream=stream, group="g", beat=one) == written
        r.set(stream_keys(stream).pause("g"), "junk")
        assert heartbeat_send(client=r, stream=stream, group="g", beat=one) == UNREADABLE_PAUSE

    def test_read_sorts_and_skips_what_cannot_be_read(self, r: redis.Redis, stream: str) -> None:
        key = stream_keys(stream).workers("g")
        r.hset(key, mapping={"b": beat("b").to_json(), "a": beat("a").to_json(),
                             "junk": "{", "half": '{"host": "h"}'})  # fmt: skip
        assert heartbeats_read(client=r, stream=stream, group="g") == [beat("a"), beat("b")]
        r.delete(key)
        r.set(key, "not a hash")
        assert heartbeats_read(client=r, stream=stream, group="g") == []

    def test_pruning_drops_other_workers_gone_for_an_hour_only(
        self, r: redis.Redis, stream: str
    ) -> None:
        key = stream_keys(stream).workers("g")
        now = now_ms()
        r.hset(key, mapping={
            "gone": beat("gone", seen_ms=now - HEARTBEAT_KEEP_MS - 1).to_json(),
            "recent": beat("recent", seen_ms=now - 60_000).to_json(),
            "junk": "{",
        })  # fmt: skip
        me = beat("me", seen_ms=now)
        heartbeat_send(client=r, stream=stream, group="g", beat=me,
                       prune_before_ms=now - HEARTBEAT_KEEP_MS)  # fmt: skip
        assert sorted(f.decode() for f in r.hkeys(key)) == ["junk", "me", "recent"]

    def test_interval_and_threshold(self) -> None:
        assert (HEARTBEAT_INTERVAL_MS, HEARTBEAT_STALE_MS) == (2000, 10_000)


class WorkerHeartbeatTests:
    """A Worker in a thread (tests/queue_core/worker/helpers.py) against the private server.
    Real processes and a Redis restart are in tests/integration/test_pause.py."""

    def test_the_heartbeat_reports_the_worker_and_a_final_one_is_written_on_stop(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        def handler(job: Any) -> None:
            if job.fields["n"] == "0":
                raise RuntimeError("boom")

        add_entries(r, stream, 3)
        worker = new_worker(redis_url, stream, handler, concurrency=2, heartbeat_ms=100)
        started = now_ms()
        with running(worker):
            wait_until(lambda: (b := heartbeats_read(client=r, stream=stream, group="g"))
                       and (b[0].processed, b[0].failed) == (2, 1), what="counts")  # fmt: skip
            [live] = heartbeats_read(client=r, stream=stream, group="g")
            assert live.consumer == "w1" and live.pid == os.getpid()
            assert (live.host, live.version) == (socket.gethostname(), ackboard_version())
            assert (live.concurrency, live.running, live.buffered) == (2, 0, 0)
            assert started - 1000 <= live.started_ms <= live.seen_ms <= now_ms()
            assert (live.paused, live.pause_at_ms) == (False, None)
            assert r.pttl(stream_keys(stream).workers("g")) > HEARTBEAT_KEEP_MS - 10_000
        [final] = heartbeats_read(client=r, stream=stream, group="g")
        # The last one says the worker stopped: not live at once, though just written.
        assert final.seen_ms >= live.seen_ms and final.stopped_ms == final.seen_ms
        assert not final.live(now_ms()) and not final.live(final.seen_ms)
        assert (final.processed, final.failed, final.running, final.buffered) == (2, 1, 0, 0)

    def test_a_failed_last_heartbeat_is_a_warning_and_the_worker_still_stops(
        self, r: redis.Redis, redis_url: str, stream: str, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:  # fmt: skip
        # Redis goes away at shutdown: only the stopped heartbeat's write fails here.
        send = ControlLink.exchange

        def exchange(self: ControlLink, client: Any, beat_: Any, *, prune: bool) -> Any:
            if beat_ is not None and beat_.stopped:
                raise redis.ConnectionError("Connection refused (the test's)")
            return send(self, client, beat_, prune=prune)

        monkeypatch.setattr(ControlLink, "exchange", exchange)
        worker = new_worker(redis_url, stream, print, heartbeat_ms=100)
        with running(worker):
            wait_until(lambda: heartbeats_read(client=r, stream=stream, group="g"),
                       what="a heartbeat")  # fmt: skip
        [last] = heartbeats_read(client=r, stream=stream, group="g")
        assert last.stopped_ms is None and last.live(now_ms())  # it ages out as before
        [warning] = [rec for rec in caplog.records if "last heartbeat" in rec.getMessage()]
        assert warning.levelname == "WARNING" and warning.exc_info is None
        assert "Connection refused (the test's)" in warning.getMessage()
        assert any(rec.getMessage().startswith("stopped: ") for rec in caplog.records)

    def test_handlers_running_when_the_pause_comes_finish_and_are_acked(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        release = threading.Event()
        seen: list[str] = []

        def handler(job: Any) -> None:
            seen.append(job.id)
            release.wait(10)

        worker = new_worker(redis_url, stream, handler, block_ms=5000)
        with running(worker):
            [first] = add_entries(r, stream, 1)
            wait_until(lambda: seen == [first], what="the handler to start")
            paused = pause_set(client=r, stream=stream, group="g", by="ops", reason="r",
                               until_ms=None, now_ms=now_ms())  # fmt: skip
            wait_until(lambda: heartbeats_read(client=r, stream=stream, group="g")[0].confirms(
                paused), timeout=2, what="the confirmation")  # fmt: skip
            [beat_] = heartbeats_read(client=r, stream=stream, group="g")
            assert beat_.running == 1
            fleet = fleet_state(pause=paused, heartbeats=[beat_], consumers=[],
                                now_ms=now_ms(), seen_within_ms=60_000)  # fmt: skip
            assert (fleet.confirmed, fleet.finishing) == (1, 1)
            add_entries(r, stream, 2)
            release.set()
            wait_until(lambda: r.xpending(stream, "g")["pending"] == 0, what="its ack")
            time.sleep(0.3)  # a window in which the paused worker must read nothing
            assert seen == [first]  # nothing new was read
            pause_clear(client=r, stream=stream, group="g")
            wait_until(lambda: len(seen) == 3, what="the rest after resume")

    def test_an_unreadable_pause_pauses_the_worker(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        r.set(stream_keys(stream).pause("g"), "someone else's text")
        seen: list[str] = []
        worker = new_worker(redis_url, stream, lambda job: seen.append(job.id))
        with running(worker):
            add_entries(r, stream, 2)
            wait_until(lambda: (b := heartbeats_read(client=r, stream=stream, group="g"))
                       and b[0].confirms(UNREADABLE_PAUSE), what="the confirmation")  # fmt: skip
            time.sleep(0.3)  # a window in which the paused worker must read nothing
            assert seen == []
            pause_clear(client=r, stream=stream, group="g")
            wait_until(lambda: len(seen) == 2, what="the entries after resume")

    def test_a_paused_worker_sleeps_between_its_pause_checks(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        # Its sweep time passes while paused; the loop once woke for it at every turn
        # (0.24 s of CPU a second). Now about 0.002.
        paused = pause_set(client=r, stream=stream, group="g", by="ops", reason="r",
                           until_ms=None, now_ms=now_ms())  # fmt: skip
        worker = new_worker(redis_url, stream, print, min_idle_ms=100, reclaim_interval_ms=10)
        with running(worker):
            wait_until(lambda: (b := heartbeats_read(client=r, stream=stream, group="g"))
                       and b[0].confirms(paused), what="the confirmation")  # fmt: skip
            cpu = time.process_time()
            time.sleep(1.5)  # the CPU a paused worker spends over this time is the figure
            assert time.process_time() - cpu < 0.15

    @pytest.mark.parametrize("value", [0, 5001, True, "2000"])
    def test_heartbeat_ms_is_checked(self, value: object) -> None:
        with pytest.raises(WorkerConfigError, match="heartbeat-ms must be a whole number"):
            WorkerConfig(stream="s", group="g", handler=print, heartbeat_ms=value)


class ClusterControlTests:
    """The same calls on the session's Redis Cluster: both keys live in the stream's slot,
    so the heartbeat pipeline is one node's; a worker there honours the pause too."""

    @pytest.mark.one_engine
    def test_pause_and_heartbeats_on_a_cluster(
        self, rc: Client, cluster_url: str, cprefix: str
    ) -> None:
        stream = "{" + cprefix + "t}orders"
        keys = stream_keys(stream)
        assert {rc.keyslot(k) for k in (keys.pause("g"), keys.workers("g"))} == {rc.keyslot(stream)}
        seen: list[str] = []
        worker = new_worker(cluster_url, stream, lambda job: seen.append(job.id),
                            heartbeat_ms=200)  # fmt: skip
        with running(worker):
            wait_until(lambda: heartbeats_read(client=rc, stream=stream, group="g"),
                       what="a heartbeat")  # fmt: skip
            paused = pause_set(client=rc, stream=stream, group="g", by="ops", reason="r",
                               until_ms=None, now_ms=now_ms())  # fmt: skip
            assert pause_read(client=rc, stream=stream, group="g") == paused
            wait_until(lambda: heartbeats_read(client=rc, stream=stream, group="g")[0]
                       .confirms(paused), what="the confirmation")  # fmt: skip
            rc.xadd(stream, {"n": "1"})
            time.sleep(0.5)  # a window in which the paused worker must read nothing
            assert seen == []
            assert pause_clear(client=rc, stream=stream, group="g") == paused
            wait_until(lambda: len(seen) == 1, what="the entry after resume")
        one = beat("other", seen_ms=now_ms() - HEARTBEAT_KEEP_MS - 1)
        rc.hset(keys.workers("g"), "other", one.to_json())
        heartbeat_send(client=rc, stream=stream, group="g", beat=beat("w1", seen_ms=now_ms()),
                       prune_before_ms=now_ms() - HEARTBEAT_KEEP_MS)  # fmt: skip
        assert [b.consumer for b in heartbeats_read(client=rc, stream=stream, group="g")] == ["w1"]
