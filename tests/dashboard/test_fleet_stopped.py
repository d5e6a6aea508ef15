"""A worker that stopped cleanly, as the dashboard shows it: its last heartbeat
carries ``stopped_ms``, so it is not live at once: the Workers row is greyed out as
"stopped" with when it stopped, the banner does not count it, Retire does not offer it as
a target, the live stamp changes, and ``ackboard_worker_up`` is 0. A heartbeat written
without the field (a worker older than it) is judged by its age, as before.

Heartbeats are written with the worker's own writer (``control.heartbeat_send``) or, for
the old format, as raw JSON without the field.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
import redis
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.insight.fleet import fleet_read, fleet_stamps, fleet_view
from queue_core import control
from queue_core.keys import stream_keys
from queue_core.types import ConsumerInfo
from tests.dashboard.action_helpers import MakeClient
from tests.dashboard.test_fleet import FLEET, beat, now_ms
from tests.factories import make_pending
from tests.html import element_text, table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]


def send_old_format(r: redis.Redis, stream: str, consumer: str, seen_ms: int) -> None:
    """A heartbeat as a worker older than ``stopped_ms`` wrote it: no such field."""
    data = json.loads(beat(r, stream, consumer, seen_ms=seen_ms).to_json())
    assert "stopped_ms" not in data
    r.hset(stream_keys(stream).workers("g"), consumer, json.dumps(data))


def page(client: Client, stream: str) -> str:
    response = client.get(reverse("dashboard:group-detail", args=[stream, "g"]))
    assert response.status_code == 200
    return response.content.decode()


def row_classes(body: str) -> dict[str, str]:
    """Each Workers row's class attribute, by row id."""
    return dict(re.findall(r'<tr id="(worker-\d+)" class="([^"]*)"', body))


def row_html(body: str, row_id: str) -> str:
    [row] = re.findall(rf'<tr id="{row_id}".*?</tr>', body, re.S)
    return str(row)


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def worker_up(text: str) -> dict[str, float]:
    """ackboard_worker_up by consumer, parsed from the /metrics text."""
    for family in text_string_to_metric_families(text):
        if family.name == "ackboard_worker_up":
            return {s.labels["consumer"]: s.value for s in family.samples}
    raise AssertionError("no ackboard_worker_up in /metrics")


class WorkersSectionTests:
    def test_a_stopped_worker_is_greyed_out_as_stopped_at_once(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)  # w1 read a second ago: XINFO has it recent
        r.xgroup_createconsumer(stream, "g", "w2")
        now = now_ms()
        stopped_at = now - 1_000
        beat(r, stream, "w1", seen_ms=stopped_at, stopped=True)
        beat(r, stream, "w2", seen_ms=now)
        body = page(make_client("olga", *FLEET), stream)

        rows = table_rows(body, "worker-")
        assert [rows["worker-1"][0], rows["worker-2"][0]] == ["w1", "w2"]
        assert rows["worker-1"][11] == f"stopped at {utc(stopped_at)} UTC"
        assert rows["worker-2"][11] == "live"
        # The stopped time is an instant the browser writes as "1 s ago" (age_span).
        assert row_html(body, "worker-1").count(f'data-since="{stopped_at}" data-ago') == 1
        assert row_classes(body) == {"worker-1": "worker stale stopped", "worker-2": "worker"}
        fleet = element_text(body, "group-fleet")
        assert "Not paused: 1 Ackboard worker live." in fleet
        assert "not pausable" not in fleet  # w1 read recently, but it said it stopped

    def test_a_stopped_worker_neither_confirms_a_pause_nor_is_a_retire_target(
        self, r: redis.Redis, stream: str
    ) -> None:
        now = now_ms()
        make_pending(r, stream, "g", "w1", 1)
        pause = control.pause_set(client=r, stream=stream, group="g", by="ops",
                                  reason="deploy", until_ms=None, now_ms=now - 5_000)  # fmt: skip
        r.xgroup_createconsumer(stream, "g", "w2")
        beat(r, stream, "w1", seen_ms=now - 500, stopped=True, pause=pause)
        beat(r, stream, "w2", seen_ms=now, pause=pause)
        consumers = [
            ConsumerInfo(name="w1", pending=1, idle_ms=500, inactive_ms=None),
            ConsumerInfo(name="w2", pending=0, idle_ms=100, inactive_ms=None),
        ]
        fleet = fleet_read(client=r, stream=stream, group="g", now_ms=now)
        view = fleet_view(fleet=fleet, consumers=consumers, now_ms=now, seen_within_ms=60_000)
        rows = {row.beat.consumer: row for row in view.rows}
        assert (rows["w1"].live, rows["w1"].stopped, rows["w1"].confirmed) == (False, True, False)
        assert (rows["w2"].live, rows["w2"].stopped, rows["w2"].confirmed) == (True, False, True)
        assert view.sentence == (
            "Paused by ops (deploy), 1 of 1 worker confirmed, 0 jobs still finishing."
        )
        assert (view.targets, view.state.not_pausable, view.stale) == (("w2",), (), 1)

    def test_an_old_heartbeat_without_the_field_is_live_while_fresh(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        now = now_ms()
        send_old_format(r, stream, "w1", now)
        send_old_format(r, stream, "w0", now - 60_000)
        body = page(make_client("olga", *FLEET), stream)
        rows = table_rows(body, "worker-")
        assert [rows["worker-1"][0], rows["worker-2"][0]] == ["w0", "w1"]
        assert rows["worker-1"][11] == f"stale last seen at {utc(now - 60_000)} UTC"
        assert rows["worker-2"][11] == "live"
        assert row_classes(body) == {"worker-1": "worker stale", "worker-2": "worker"}


class LiveStampTests:
    def test_the_stop_changes_the_stamp_and_it_holds_still_after(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        pair = (stream, "g")
        now = now_ms()
        beat(r, stream, "w1", seen_ms=now - 2_000)
        running = fleet_stamps(client=r, groups=[pair], now_ms=now)[pair]
        beat(r, stream, "w1", seen_ms=now - 1_000, stopped=True)
        stopped = fleet_stamps(client=r, groups=[pair], now_ms=now)[pair]
        assert stopped != running
        [(_, live, seen, _)] = stopped[1]
        assert (live, seen) == (False, now - 1_000)
        # Not live already: its going stale later changes nothing the page shows.
        assert fleet_stamps(client=r, groups=[pair], now_ms=now + 60_000)[pair] == stopped


class MetricsTests:
    def test_worker_up_is_0_for_a_stopped_worker_and_1_for_an_old_live_one(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: SettingsWrapper
    ) -> None:
        settings.ACKBOARD_STREAMS = (stream,)
        make_pending(r, stream, "g", "w1", 1)
        now = now_ms()
        beat(r, stream, "w1", seen_ms=now, stopped=True)
        beat(r, stream, "w2", seen_ms=now)
        send_old_format(r, stream, "w3", now)
        send_old_format(r, stream, "w4", now - 60_000)
        from dashboard.views import ops

        ops._cache = None
        text = make_client("rita", "view_queues").get("/metrics").content.decode()
        assert worker_up(text) == {"w1": 0.0, "w2": 1.0, "w3": 1.0, "w4": 0.0}
