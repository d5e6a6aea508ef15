"""Fleet control on the dashboard, on real Redis: Pause, Resume, Retire and
Retire idle consumers through their buttons, ``manage.py ackboard`` and the JSON API
(permission, CSRF, audit row, clear 4xx for bad input), the group page's pause banner and
Workers section, the live signature of a group page, and the fleet figures of /metrics.

Heartbeats are written with the worker's own writer (``control.heartbeat_send``), so
what the page reads is what a worker writes.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.access.api_tokens import token_issue
from dashboard.insight.fleet import fleet_stamps
from dashboard.live.registry import Poll, Surface
from dashboard.models import AuditEvent
from queue_core import admin, control
from queue_core import clock as queue_clock
from queue_core.keys import stream_keys
from queue_core.types import LiveStamps
from tests.clock import FrozenClock
from tests.dashboard.action_helpers import HTMX, MakeClient, last_audit, pending_ids
from tests.factories import CountingRedis, make_pending, make_user
from tests.html import element_text, labelled_text, table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]

#: An operator of the fleet: reading, and the two fleet permissions.
FLEET = ("view_queues", "pause_group", "retire_consumer")


#: When the test workers started (a fixed time: a worker's beats all carry the same one).
STARTED_MS = 1_796_000_000_000


def now_ms() -> int:
    """The pages' clock (frozen in the tests that ask for ``clock``)."""
    return queue_clock.now_ms()


def beat(
    r: redis.Redis,
    stream: str,
    consumer: str,
    *,
    group: str = "g",
    seen_ms: int | None = None,
    pause: control.Pause | None = None,
    running: int = 0,
    buffered: int = 0,
    processed: int = 0,
    failed: int = 0,
    stopped: bool = False,
) -> control.Heartbeat:
    """A heartbeat as a worker sends it (``pause``: the one it confirms; ``stopped``: the
    last one of a worker that stopped cleanly)."""
    now = now_ms()
    heartbeat = control.Heartbeat(
        consumer=consumer,
        host="web-1",
        pid=4242,
        version="0.9.0",
        concurrency=4,
        running=running,
        buffered=buffered,
        processed=processed,
        failed=failed,
        started_ms=STARTED_MS,
        seen_ms=now if seen_ms is None else seen_ms,
        paused=pause is not None,
        pause_at_ms=None if pause is None else pause.at_ms,
    )
    if stopped:
        heartbeat = replace(heartbeat, stopped_ms=heartbeat.seen_ms)
    control.heartbeat_send(client=r, stream=stream, group=group, beat=heartbeat)
    return heartbeat


def group_url(stream: str, action: str, group: str = "g") -> str:
    return reverse("dashboard:group-action", args=[stream, group, action])


def consumer_url(stream: str, consumer: str, action: str = "retire", group: str = "g") -> str:
    return reverse("dashboard:consumer-action", args=[stream, group, consumer, action])


def page(client: Client, stream: str, group: str = "g") -> str:
    response = client.get(reverse("dashboard:group-detail", args=[stream, group]))
    assert response.status_code == 200
    return response.content.decode()


def pause_of(r: redis.Redis, stream: str) -> control.Pause | None:
    return control.pause_read(client=r, stream=stream, group="g")


def message(response: Any) -> str:
    """The one flash message of an htmx answer (out of band)."""
    texts = re.findall(r'<div class="flash[^"]*"[^>]*>(.*?)</div>', response.content.decode(), re.S)
    assert len(texts) == 1, response.content
    return " ".join(html.unescape(texts[0]).split())


def create_consumer(r: redis.Redis, stream: str, consumer: str, group: str = "g") -> None:
    r.xgroup_createconsumer(stream, group, consumer)


# --- the page ---------------------------------------------------------------------------


class GroupPageTests:
    def test_banner_and_workers_when_running(
        self, r: redis.Redis, stream: str, make_client: MakeClient, clock: FrozenClock
    ) -> None:
        make_pending(r, stream, "g", "w1", 2)
        create_consumer(r, stream, "foreign")  # reads, but sends no heartbeat
        beat(r, stream, "w1", running=2, processed=10, failed=1)
        gone_seen = now_ms() - 120_000
        beat(r, stream, "w0-gone", seen_ms=gone_seen)
        body = page(make_client("olga", *FLEET), stream)
        fleet = element_text(body, "group-fleet")
        assert "Not paused: 1 Ackboard worker live." in fleet
        assert "not pausable 1 consumer seen recently without an Ackboard heartbeat" in fleet
        assert "foreign" in fleet and "w1" not in fleet
        rows = table_rows(body, "worker-")
        assert rows["worker-1"][0] == "w0-gone" and rows["worker-2"][0] == "w1"
        assert rows["worker-2"][1:10] == ["no", "web-1", "4242", "0.9.0", "4", "2", "0", "10", "1"]
        assert rows["worker-2"][11] == "live"
        assert rows["worker-1"][11] == "stale last seen at 2026-03-14 15:07:26 UTC"
        # Started and last seen are instants the browser writes as "3 min ago" (age_span):
        # the server's text is the UTC time, so the HTML is the same until a beat changes.
        started = datetime.fromtimestamp(STARTED_MS // 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        assert rows["worker-2"][10] == f"at {started} UTC"
        worker = {m[0]: m[1] for m in re.findall(r'<tr id="(worker-\d)"(.*?)</tr>', body, re.S)}
        assert worker["worker-2"].count(f'data-since="{STARTED_MS}" data-ago') == 1
        assert worker["worker-1"].count(f'data-since="{gone_seen}" data-ago') == 1
        assert re.search(r'<tr id="worker-1" class="worker stale"', body)
        assert re.search(r'<tr id="worker-2" class="worker"', body)
        assert labelled_text(body, "Pause group")  # the dialog is there for an operator

    def test_banner_says_who_paused_and_what_the_workers_confirm(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        until = now_ms() + 3_600_000
        pause = control.pause_set(
            client=r, stream=stream, group="g", by="ops-oncall", reason="deploy",
            until_ms=until, now_ms=now_ms(),
        )  # fmt: skip
        for name in ("w1", "w2"):
            beat(r, stream, name, pause=pause, running=1)
        beat(r, stream, "w3", buffered=0)  # has not seen the pause yet
        body = page(make_client("olga", *FLEET), stream)
        fleet = element_text(body, "group-fleet")
        assert fleet.startswith(
            "paused Paused by ops-oncall (deploy), 2 of 3 workers confirmed, "
            "2 jobs still finishing."
        )
        assert "Resumes by itself at " in fleet
        rows = table_rows(body, "worker-")
        assert [row[1] for row in rows.values()] == ["paused", "paused", "not yet"]
        assert labelled_text(body, "Resume group")

    def test_what_cannot_be_read_never_breaks_the_page_or_the_live_stamp(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        keys = stream_keys(stream)
        beat(r, stream, "w1")
        r.hset(keys.workers("g"), "junk", "not json")  # skipped
        r.hset(keys.pause("g"), "a", "b")  # a pause key of another type still pauses
        body = page(make_client("olga", *FLEET), stream)
        assert element_text(body, "group-fleet").startswith(
            "paused Paused by (unknown) ((unreadable)), 0 of 1 worker confirmed"
        )
        assert [row[0] for row in table_rows(body, "worker-").values()] == ["w1"]
        stamps = fleet_stamps(client=r, groups=[(stream, "g")])
        assert stamps[(stream, "g")][0] == "wrong type"
        r.delete(keys.pause("g"))
        r.set(keys.workers("g"), "x")
        assert "Not paused. No Ackboard worker" in element_text(
            page(make_client("rex", *FLEET), stream), "group-fleet"
        )
        assert fleet_stamps(client=r, groups=[(stream, "g")])[(stream, "g")] == (None, ())

    def test_a_reader_sees_the_banner_but_no_buttons(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        body = page(make_client("rita", "view_queues"), stream)
        assert "Not paused" in element_text(body, "group-fleet")
        for absent in (
            "Pause group",
            "Retire consumer",
            "retire-idle-form",
            "data-consumer-dialog",
        ):
            assert absent not in body


# --- Pause and Resume -------------------------------------------------------------------


class PauseTests:
    def test_pause_with_auto_resume_is_set_audited_and_reloads(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        client = make_client("olga", *FLEET)
        before = now_ms()
        response = client.post(
            group_url(stream, "pause"), {"reason": "deploy", "resume_minutes": "30"}, headers=HTMX
        )
        assert response.status_code == 200 and response.headers["HX-Refresh"] == "true"
        pause = pause_of(r, stream)
        assert pause is not None and (pause.by, pause.reason) == ("olga", "deploy")
        assert pause.until_ms is not None
        assert before + 30 * 60_000 <= pause.until_ms <= now_ms() + 30 * 60_000
        ttl = r.pttl(stream_keys(stream).pause("g"))
        assert 29 * 60_000 < ttl <= 30 * 60_000  # Redis drops it by itself (PXAT)
        event = last_audit()
        assert (event.action, event.result, event.username, event.channel) == (
            "pause", "ok", "olga", "button",
        )  # fmt: skip
        assert (event.stream, event.group, event.reason) == (stream, "g", "deploy")
        assert event.state_before["paused"] is False
        assert event.state_before["pause_until_ms"] == pause.until_ms
        assert "resumes by itself at" in event.detail

    def test_pause_at_a_utc_time_and_pausing_again_replaces_it(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        client = make_client("olga", *FLEET)
        client.post(group_url(stream, "pause"), {"reason": "first"}, headers=HTMX)
        response = client.post(
            group_url(stream, "pause"),
            {"reason": "second", "resume_at": "2999-01-02T03:04Z"},
            headers=HTMX,
        )
        assert response.status_code == 200
        pause = pause_of(r, stream)
        assert pause is not None and pause.reason == "second"
        assert pause.until_ms == int(datetime(2999, 1, 2, 3, 4, tzinfo=UTC).timestamp() * 1000)
        event = last_audit()
        assert event.state_before["paused"] is True
        assert event.state_before["pause_reason"] == "first"

    @pytest.mark.parametrize(
        ("fields", "expected"),
        [
            ({}, "Pause needs a reason"),
            ({"reason": "  "}, "Pause needs a reason"),
            ({"reason": "x", "resume_minutes": "soon"}, "resume_minutes must be a whole number"),
            ({"reason": "x", "resume_minutes": "0"}, "resume_minutes must be between 1 and"),
            ({"reason": "x", "resume_at": "tomorrow"}, "resume_at must be a UTC time"),
            ({"reason": "x", "resume_at": "2999-01-01T00:00+02:00"}, "must be in UTC"),
            ({"reason": "x", "resume_at": "2001-01-01T00:00"}, "has passed"),
            (
                {"reason": "x", "resume_at": "2999-01-01T00:00", "resume_minutes": "5"},
                "not both",
            ),
        ],
    )
    def test_bad_input_is_a_clear_400_audited_and_changes_nothing(
        self,
        r: redis.Redis,
        stream: str,
        make_client: MakeClient,
        fields: dict[str, str],
        expected: str,
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        response = make_client("olga", *FLEET).post(
            group_url(stream, "pause"), fields, headers=HTMX
        )
        assert response.status_code == 400
        assert expected in message(response)
        assert pause_of(r, stream) is None
        event = last_audit()
        assert (event.action, event.result) == ("pause", "refused")

    def test_resume_removes_the_pause_and_resuming_twice_is_409(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        control.pause_set(client=r, stream=stream, group="g", by="ops", reason="deploy",
                          until_ms=None, now_ms=now_ms())  # fmt: skip
        client = make_client("olga", *FLEET)
        response = client.post(group_url(stream, "resume"), headers=HTMX)
        assert response.status_code == 200 and pause_of(r, stream) is None
        event = last_audit()
        assert (event.action, event.result) == ("resume", "ok")
        assert event.state_before["paused_by"] == "ops"
        again = client.post(group_url(stream, "resume"), headers=HTMX)
        assert again.status_code == 409
        assert message(again) == "g is not paused. Nothing was changed."
        assert last_audit().result == "refused"

    def test_without_the_permission_403_audited_and_nothing_paused(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        client = make_client("rex", "view_queues", "retire_consumer", "retry_entry")
        response = client.post(group_url(stream, "pause"), {"reason": "x"}, headers=HTMX)
        assert response.status_code == 403
        assert message(response) == "You do not have permission to pause."
        assert pause_of(r, stream) is None
        event = last_audit()
        assert (event.action, event.result, event.username) == ("pause", "refused", "rex")

    def test_csrf_is_enforced(self, r: redis.Redis, stream: str, django_user_model: Any) -> None:
        make_pending(r, stream, "g", "w1", 1)
        client = Client(enforce_csrf_checks=True)
        client.force_login(make_user(django_user_model, "olga", *FLEET))
        response = client.post(group_url(stream, "pause"), {"reason": "x"}, headers=HTMX)
        assert response.status_code == 403
        assert pause_of(r, stream) is None and not AuditEvent.objects.exists()

    def test_unknown_group_is_404_and_unknown_action_404_not_audited(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        client = make_client("olga", *FLEET)
        response = client.post(group_url(stream, "pause", group="nope"), {"reason": "x"},
                               headers=HTMX)  # fmt: skip
        assert response.status_code == 404
        assert "no consumer group 'nope'" in message(response)
        assert last_audit().result == "refused"
        count = AuditEvent.objects.count()
        assert client.post(group_url(stream, "retry"), headers=HTMX).status_code == 404
        assert client.post(group_url(stream, "retire"), headers=HTMX).status_code == 404
        assert AuditEvent.objects.count() == count

    def test_plain_post_redirects_back_to_the_group(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        response = make_client("olga", *FLEET).post(group_url(stream, "pause"), {"reason": "x"})
        assert response.status_code == 303
        assert response["Location"] == reverse("dashboard:group-detail", args=[stream, "g"])


# --- Retire -----------------------------------------------------------------------------


class RetireTests:
    def test_hand_entries_to_another_consumer(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "old-1", 3)
        create_consumer(r, stream, "w2")
        response = make_client("olga", *FLEET).post(
            consumer_url(stream, "old-1"), {"mode": "move", "to": "w2"}, headers=HTMX
        )
        assert response.status_code == 200, response.content
        rows = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert [(x["message_id"].decode(), x["consumer"]) for x in rows] == [
            (i, b"w2") for i in ids
        ]
        consumers = {c["name"] for c in r.xinfo_consumers(stream, "g")}
        assert consumers == {b"w2"}
        event = last_audit()
        assert (event.action, event.result, event.group) == ("retire", "ok", "g")
        assert event.state_before["consumer"] == "old-1"
        assert event.state_before["consumer_pending"] == 3
        assert (event.state_before["moved"], event.state_before["to"]) == (3, "w2")
        assert (
            event.detail
            == "Retired consumer old-1: handed its 3 pending entries to w2, and deleted it."
        )

    def test_make_entries_due_for_reclaim(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "old-1", 2)
        response = make_client("olga", *FLEET).post(
            consumer_url(stream, "old-1"), {"mode": "reclaim"}, headers=HTMX
        )
        assert response.status_code == 200
        assert pending_ids(r, stream) == ids  # none lost
        rows = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert {x["consumer"] for x in rows} == {admin.PARKING_CONSUMER.encode()}
        assert all(x["time_since_delivered"] >= admin.RETIRE_DUE_IDLE_MS for x in rows)

    def test_a_consumer_with_a_live_heartbeat_is_refused_409_with_the_reason(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "w1", 2)
        beat(r, stream, "w1")
        response = make_client("olga", *FLEET).post(
            consumer_url(stream, "w1"), {"mode": "reclaim"}, headers=HTMX
        )
        assert response.status_code == 409
        assert "w1 has a live heartbeat" in message(response)
        assert pending_ids(r, stream) == ids
        event = last_audit()
        assert (event.action, event.result) == ("retire", "refused")
        assert event.state_before["refused"] == "live heartbeat"

    @pytest.mark.parametrize(
        ("fields", "consumer", "status", "expected"),
        [
            ({}, "c1", 400, "mode must be 'move'"),
            ({"mode": "sideways"}, "c1", 400, "mode must be 'move'"),
            ({"mode": "move"}, "c1", 400, "the consumer to hand its entries to is required"),
            ({"mode": "move", "to": "c1"}, "c1", 400, "Choose another consumer"),
            ({"mode": "move", "to": "x" * 300}, "c1", 400, "longer than 255"),
            ({"mode": "reclaim"}, "ghost", 404, "no consumer 'ghost' in group 'g'"),
            ({"mode": "move", "to": "ghost"}, "c1", 409, "no consumer 'ghost' in this group"),
        ],
    )
    def test_bad_input_and_unknown_names(
        self,
        r: redis.Redis,
        stream: str,
        make_client: MakeClient,
        fields: dict[str, str],
        consumer: str,
        status: int,
        expected: str,
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 1)
        response = make_client("olga", *FLEET).post(
            consumer_url(stream, consumer), fields, headers=HTMX
        )
        assert response.status_code == status
        assert expected in message(response)
        assert pending_ids(r, stream) == ids
        assert {c["name"] for c in r.xinfo_consumers(stream, "g")} == {b"c1"}
        assert (last_audit().action, last_audit().result) == ("retire", "refused")

    def test_without_the_permission_403(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        client = make_client("pat", "view_queues", "pause_group")
        response = client.post(consumer_url(stream, "c1"), {"mode": "reclaim"}, headers=HTMX)
        assert response.status_code == 403
        assert {c["name"] for c in r.xinfo_consumers(stream, "g")} == {b"c1"}
        event = last_audit()
        assert (event.result, event.username, event.group) == ("refused", "pat", "g")
        assert event.state_before == {"consumer": "c1"}

    def test_the_dialog_offers_live_consumers_first_and_never_ackboards_own(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "a-seen", 1)
        for name in ("z-beating", admin.PARKING_CONSUMER, "ackboard-operator"):
            create_consumer(r, stream, name)
        beat(r, stream, "z-beating")
        body = page(make_client("olga", *FLEET), stream)
        select = re.search(r'<select name="to"[^>]*>(.*?)</select>', body, re.S)
        assert select is not None
        assert re.findall(r'<option value="([^"]*)"', select[1]) == ["z-beating", "a-seen"]

    def test_consumer_rows_carry_a_retire_button_with_the_consumer_url(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "a/b %c", 1)
        body = page(make_client("olga", *FLEET), stream)
        [url] = re.findall(r'data-consumer="a/b %c" data-url="([^"]+)">Retire</button>', body)
        assert url == consumer_url(stream, "a/b %c")
        assert body.count('id="row-dialog-retire"') == 1
        reader = page(make_client("rita", "view_queues"), stream)
        assert "data-consumer-dialog" not in reader


# --- Retire idle consumers --------------------------------------------------------------


class RetireIdleTests:
    def _world(self, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "busy", 1)  # holds an entry: never retired
        for name in ("idle-1", "idle-2", "beating"):
            create_consumer(r, stream, name)
        beat(r, stream, "beating")
        time.sleep(1.1)  # idle time: past the 1 s the retire-idle form takes

    def test_dry_run_lists_then_run_retires_exactly_those(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        self._world(r, stream)
        client = make_client("olga", *FLEET)
        url = reverse("dashboard:idle-consumers", args=[stream, "g"])
        dry = client.get(url, {"idle": "1s"}, headers=HTMX)
        assert dry.status_code == 200
        body = dry.content.decode()
        assert re.findall(r'name="names" value="([^"]+)"', body) == ["idle-1", "idle-2"]
        assert 'data-dry-run-count="2"' in body
        assert not AuditEvent.objects.exists()  # a dry run changes and audits nothing
        create_consumer(r, stream, "new-since")  # not shown, so never retired
        response = client.post(
            group_url(stream, "retire-idle"),
            {"idle": "1s", "names": ["idle-1", "idle-2"], "reason": "cleanup"},
            headers=HTMX,
        )
        assert response.status_code == 200, response.content
        left = {c["name"].decode() for c in r.xinfo_consumers(stream, "g")}
        assert left == {"busy", "beating", "new-since"}
        event = last_audit()
        assert (event.action, event.result, event.reason) == ("retire-idle", "ok", "cleanup")
        assert event.detail == "Retired 2 idle consumers: idle-1, idle-2."
        assert event.state_before["retired"] == ["idle-1", "idle-2"]

    def test_changed_since_the_dry_run_is_kept(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        self._world(r, stream)
        # idle-2 reads (and acks) an entry: holds nothing, but is not idle any more.
        r.xadd(stream, {"n": "late"})
        reply: Any = r.xreadgroup("g", "idle-2", {stream: ">"}, count=1)
        r.xack(stream, "g", reply[0][1][0][0])
        client = make_client("olga", *FLEET)
        response = client.post(
            group_url(stream, "retire-idle"),
            {"idle": "1s", "names": ["idle-1", "idle-2", "busy", "beating"]},
            headers=HTMX,
        )
        assert response.status_code == 200
        assert last_audit().detail == (
            "Retired 1 idle consumer: idle-1. Kept 3 that changed since the dry run: "
            "idle-2, busy, beating."
        )
        none = client.post(
            group_url(stream, "retire-idle"), {"idle": "1s", "names": ["busy"]}, headers=HTMX
        )
        assert none.status_code == 409
        assert last_audit().state_before["kept"] == ["busy"]

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ({}, "idle is required"),
            ({"idle": "soon"}, "idle must be a time such as 90s"),
            ({"idle": "0s"}, "between 1 s and 365 d"),
            ({"idle": "400d"}, "between 1 s and 365 d"),
        ],
    )
    def test_dry_run_bad_input_is_400(
        self, r: redis.Redis, stream: str, make_client: MakeClient, query: dict[str, str],
        expected: str,
    ) -> None:  # fmt: skip
        make_pending(r, stream, "g", "c1", 1)
        url = reverse("dashboard:idle-consumers", args=[stream, "g"])
        response = make_client("olga", *FLEET).get(url, query, headers=HTMX)
        assert response.status_code == 400
        assert expected in response.content.decode()

    def test_dry_run_needs_the_permission_and_a_group(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        url = reverse("dashboard:idle-consumers", args=[stream, "g"])
        assert make_client("rita", "view_queues").get(url, {"idle": "1h"}).status_code == 403
        missing = reverse("dashboard:idle-consumers", args=[stream, "nope"])
        response = make_client("olga", *FLEET).get(missing, {"idle": "1h"})
        assert response.status_code == 404  # a page of its own without htmx
        assert "<html" in response.content.decode()

    def test_run_without_names_is_400(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        response = make_client("olga", *FLEET).post(
            group_url(stream, "retire-idle"), {"idle": "1h"}, headers=HTMX
        )
        assert response.status_code == 400
        assert "run the dry run first" in message(response)


# --- CLI and API ------------------------------------------------------------------------


def ackboard(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("ackboard", *args, stdout=out, stderr=err)
    except CommandError as exc:
        err.write(str(exc))
        return exc.returncode, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


@pytest.fixture
def fleet_user(django_user_model: Any) -> Any:
    return make_user(django_user_model, "olga", *FLEET)


class CliTests:
    def test_pause_then_resume(self, r: redis.Redis, stream: str, fleet_user: Any) -> None:
        make_pending(r, stream, "g", "w1", 1)
        code, out, err = ackboard(
            "pause", stream, "g", "--user", "olga", "--reason", "deploy", "--resume-minutes", "5"
        )
        assert (code, err) == (0, "")
        assert out.startswith("Paused g: its Ackboard workers stop reading")
        pause = pause_of(r, stream)
        assert pause is not None and (pause.by, pause.reason) == ("olga", "deploy")
        assert (last_audit().action, last_audit().channel) == ("pause", "cli")
        code, out, _ = ackboard("resume", stream, "g", "--user", "olga")
        assert code == 0 and out.startswith("Resumed g (paused by olga: deploy)")
        assert pause_of(r, stream) is None
        code, _, err = ackboard("resume", stream, "g", "--user", "olga")
        assert (code, err) == (1, "g is not paused. Nothing was changed.")

    def test_pause_needs_a_reason_and_a_permission(
        self, r: redis.Redis, stream: str, fleet_user: Any, django_user_model: Any
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        code, _, err = ackboard("pause", stream, "g", "--user", "olga")
        assert code == 2 and err.startswith("Pause needs a reason")
        make_user(django_user_model, "rita", "view_queues")
        code, _, err = ackboard("pause", stream, "g", "--user", "rita", "--reason", "x")
        assert (code, err) == (3, "You do not have permission to pause.")
        assert pause_of(r, stream) is None

    def test_retire_to_and_reclaim(self, r: redis.Redis, stream: str, fleet_user: Any) -> None:
        ids = make_pending(r, stream, "g", "old-1", 2)
        make_pending(r, stream, "g", "old-2", 1, create=False)
        create_consumer(r, stream, "w2")
        code, out, _ = ackboard("retire", stream, "g", "old-1", "--to", "w2", "--user", "olga")
        assert code == 0
        assert (
            out.strip()
            == "Retired consumer old-1: handed its 2 pending entries to w2, and deleted it."
        )
        code, _, _ = ackboard("retire", stream, "g", "old-2", "--reclaim", "--user", "olga")
        assert code == 0
        assert set(pending_ids(r, stream)) >= set(ids)
        assert {c["name"] for c in r.xinfo_consumers(stream, "g")} == {
            b"w2",
            admin.PARKING_CONSUMER.encode(),
        }
        assert last_audit().channel == "cli"
        code, _, err = ackboard("retire", stream, "g", "ghost", "--reclaim", "--user", "olga")
        assert code == 4 and "no consumer 'ghost'" in err

    def test_retire_idle_dry_run_then_yes(
        self, r: redis.Redis, stream: str, fleet_user: Any
    ) -> None:
        make_pending(r, stream, "g", "busy", 1)
        create_consumer(r, stream, "idle one")
        time.sleep(1.1)  # idle time: past the 1 s the retire-idle form takes
        code, out, _ = ackboard("retire-idle", stream, "g", "--idle", "1s", "--user", "olga")
        assert code == 0
        assert "Dry run: 1 consumer of g idle at least 1 s" in out
        assert out.strip().endswith("To act, run again with --yes --idle 1s --names 'idle one'.")
        assert not AuditEvent.objects.exists()
        code, out, _ = ackboard(
            "retire-idle", stream, "g", "--idle", "1s", "--yes", "--names", "idle one",
            "--user", "olga",
        )  # fmt: skip
        assert (code, out.strip()) == (0, "Retired 1 idle consumer: idle one.")
        assert {c["name"] for c in r.xinfo_consumers(stream, "g")} == {b"busy"}
        code, _, err = ackboard("retire-idle", stream, "g", "--idle", "1s", "--yes",
                                "--user", "olga")  # fmt: skip
        assert code == 2 and "run the dry run first" in err

    def test_redis_down_is_exit_5(
        self, r: redis.Redis, stream: str, fleet_user: Any, settings: SettingsWrapper
    ) -> None:
        settings.ACKBOARD_REDIS_URL = "redis://127.0.0.1:1/0"
        code, _, err = ackboard("pause", stream, "g", "--reason", "x", "--user", "olga")
        assert code == 5 and "\n" not in err.strip()


Api = Callable[[str, dict[str, Any]], tuple[int, dict[str, Any]]]


@pytest.fixture
def api(fleet_user: Any) -> Api:
    """POST an action to the JSON API as ``fleet_user``'s token: (status, JSON answer)."""
    _, token = token_issue(user=fleet_user, name="tests")
    client = Client()

    def post(action: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        response = client.post(
            reverse("dashboard:api-action", args=[action]),
            json.dumps(body),
            content_type="application/json",
            headers={"Authorization": f"Bearer {token}"},
        )
        return response.status_code, response.json()

    return post


class ApiTests:
    def test_pause_resume_retire(self, r: redis.Redis, stream: str, api: Api) -> None:
        make_pending(r, stream, "g", "old-1", 1)
        create_consumer(r, stream, "w2")
        body = {"stream": stream, "group": "g", "reason": "deploy", "resume_minutes": 10}
        status, body = api("pause", body)
        assert status == 200 and body["action"] == "pause" and body["channel"] == "api"
        assert pause_of(r, stream) is not None
        status, body = api("resume", {"stream": stream, "group": "g"})
        assert status == 200 and pause_of(r, stream) is None
        body = {"stream": stream, "group": "g", "consumer": "old-1", "mode": "move", "to": "w2"}
        status, body = api("retire", body)
        assert status == 200 and body["reported"]["moved"] == 1
        status, body = api("retire", {"stream": stream, "group": "g"})
        assert (status, body["message"]) == (400, "consumer is required (a string)")
        assert last_audit().channel == "api"

    def test_retire_idle_dry_run_then_confirm(self, r: redis.Redis, stream: str, api: Api) -> None:
        make_pending(r, stream, "g", "busy", 1)
        create_consumer(r, stream, "gone")
        time.sleep(1.1)  # idle time: past the 1 s the retire-idle form takes
        status, body = api("retire-idle", {"stream": stream, "group": "g", "idle": "1s"})
        assert status == 200 and body["dry_run"] is True and body["names"] == ["gone"]
        status, body = api(
            "retire-idle",
            {"stream": stream, "group": "g", "idle": "1s", "confirm": True, "names": body["names"]},
        )
        assert status == 200 and body["reported"]["retired"] == ["gone"]
        body = {"stream": stream, "group": "g", "idle": "1s", "names": "gone", "confirm": True}
        status, body = api("retire-idle", body)
        assert (status, body["message"]) == (400, "names must be a list of strings")

    def test_hostile_bodies_never_500(self, r: redis.Redis, stream: str, api: Api) -> None:
        make_pending(r, stream, "g", "c1", 1)
        before = pending_ids(r, stream)
        values: list[Any] = [None, True, -1, 10**30, [], {}, ["x"], "", "x" * 10_000, "\x00"]
        keys = ["stream", "group", "consumer", "reason", "mode", "to", "idle", "names",
                "resume_minutes", "resume_at", "confirm"]  # fmt: skip
        bad = []
        for group in ("nope", "g"):
            for action in ("pause", "resume", "retire", "retire-idle"):
                for key in keys:
                    for value in values:
                        body: dict[str, Any] = {"stream": stream, "group": group, "consumer": "c1"}
                        body[key] = value
                        status, _ = api(action, body)
                        if status not in {200, 400, 403, 404, 409}:
                            bad.append((group, action, key, repr(value)[:20], status))
        assert bad == []
        # Retire never ran (no valid mode was sent): c1 keeps its entry.
        assert pending_ids(r, stream) == before


# --- live and /metrics -------------------------------------------------------------------


class LiveSignatureTests:
    def test_a_live_workers_beat_does_not_change_the_stamp_but_its_figures_do(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        pair = (stream, "g")
        now = now_ms()
        beat(r, stream, "w1", seen_ms=now - 4000, processed=5)
        first = fleet_stamps(client=r, groups=[pair], now_ms=now)[pair]
        beat(r, stream, "w1", seen_ms=now - 2000, processed=5)  # only seen_ms moved
        assert fleet_stamps(client=r, groups=[pair], now_ms=now)[pair] == first
        beat(r, stream, "w1", seen_ms=now - 2000, processed=6)
        counted = fleet_stamps(client=r, groups=[pair], now_ms=now)[pair]
        assert counted != first
        later = now + 20_000  # the worker went stale: shown greyed, so it changes
        assert fleet_stamps(client=r, groups=[pair], now_ms=later)[pair] != counted
        control.pause_set(client=r, stream=stream, group="g", by="o", reason="x",
                          until_ms=None, now_ms=now)  # fmt: skip
        assert fleet_stamps(client=r, groups=[pair], now_ms=now)[pair] != counted

    def test_the_group_signature_holds_the_fleet_stamp_in_one_round_trip(
        self, r: redis.Redis, stream: str, redis_url: str
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        counting = CountingRedis(connection_pool=redis.ConnectionPool.from_url(redis_url))
        pairs = [(stream, "g"), (stream, "other"), (stream + "2", "g")]
        stamps = fleet_stamps(client=counting, groups=pairs)
        assert counting.round_trips == 1 and set(stamps) == set(pairs)
        surface = Surface("group", stream=stream, group="g")
        empty = LiveStamps(streams={}, pending={})
        a = surface.spec.signature(surface, Poll(empty, {}, (), {(stream, "g"): "a"}))
        b = surface.spec.signature(surface, Poll(empty, {}, (), {(stream, "g"): "b"}))
        assert a != b
        assert {"group-fleet", "group-workers"} <= set(surface.spec.partials)


class MetricsTests:
    def test_per_worker_and_pause_figures(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: SettingsWrapper
    ) -> None:
        settings.ACKBOARD_STREAMS = (stream,)
        make_pending(r, stream, "g", "w1", 1)
        pause = control.pause_set(client=r, stream=stream, group="g", by="o", reason="x",
                                  until_ms=None, now_ms=now_ms())  # fmt: skip
        beat(r, stream, "w1", processed=12, failed=3, pause=pause)
        beat(r, stream, "w0", seen_ms=now_ms() - 60_000, processed=7)
        from dashboard.views import ops

        ops._cache = None
        text = make_client("rita", "view_queues").get("/metrics").content.decode()
        labels = f'consumer="w1",group="g",stream="{stream}"'
        assert f"ackboard_worker_up{{{labels}}} 1.0" in text
        assert f"ackboard_worker_processed_total{{{labels}}} 12.0" in text
        assert f"ackboard_worker_failed_total{{{labels}}} 3.0" in text
        assert f'ackboard_worker_up{{consumer="w0",group="g",stream="{stream}"}} 0.0' in text
        assert f'ackboard_group_paused{{group="g",stream="{stream}"}} 1.0' in text
        assert f'ackboard_group_pause_confirmed_workers{{group="g",stream="{stream}"}} 1.0' in text
        assert "ackboard_fleet_groups_unread 0.0" in text

    def test_groups_over_the_cap_are_counted_not_read(
        self, r: redis.Redis, stream: str, redis_url: str
    ) -> None:
        from dashboard.insight.fleet import metrics_fleets

        counting = CountingRedis(connection_pool=redis.ConnectionPool.from_url(redis_url))
        collector = metrics_fleets(
            client=counting, groups=[(stream, f"g{i}") for i in range(5)], cap=2
        )
        assert counting.round_trips == 1
        assert len(collector.fleets) == 2 and collector.unread == 3
