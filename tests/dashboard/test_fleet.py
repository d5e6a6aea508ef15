"""Fleet control on the dashboard (issue 12), on real Redis: Pause, Resume, Retire and
Retire idle consumers through their buttons, ``manage.py ackboard`` and the JSON API
(permission, CSRF, audit row, clear 4xx for bad input), the group page's pause banner and
Workers section, the live signature of a group page, and the fleet figures of /metrics.

Heartbeats are written with the worker's own writer (``control.heartbeat_send``), so
what the page reads is what a worker writes.
"""

from __future__ import annotations

import json
import re
import time
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.api_tokens import token_issue
from dashboard.fleet import fleet_stamps
from dashboard.live.registry import Poll, Surface
from dashboard.models import AuditEvent
from queue_core import admin, control
from queue_core.keys import stream_keys
from queue_core.types import LiveStamps
from tests.dashboard.action_helpers import HTMX, MakeClient, last_audit, pending_ids
from tests.factories import CountingRedis, make_pending, make_user
from tests.html import element_text, labelled_text, table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]

#: An operator of the fleet: reading, and the two fleet permissions.
FLEET = ("view_queues", "pause_group", "retire_consumer")


def now_ms() -> int:
    return int(time.time() * 1000)


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
) -> control.Heartbeat:
    """A heartbeat as a worker sends it (``pause``: the one it confirms)."""
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
        started_ms=now - 60_000,
        seen_ms=now if seen_ms is None else seen_ms,
        paused=pause is not None,
        pause_at_ms=None if pause is None else pause.at_ms,
    )
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
    texts = re.findall(r'<div class="flash[^"]*">(.*?)</div>', response.content.decode(), re.S)
    assert len(texts) == 1, response.content
    return " ".join(texts[0].split())


def create_consumer(r: redis.Redis, stream: str, consumer: str, group: str = "g") -> None:
    r.execute_command("XGROUP", "CREATECONSUMER", stream, group, consumer)


# --- the page ---------------------------------------------------------------------------


class GroupPageTests:
    def test_banner_and_workers_when_running(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 2)
        create_consumer(r, stream, "foreign")  # reads, but sends no heartbeat
        beat(r, stream, "w1", running=2, processed=10, failed=1)
        beat(r, stream, "w0-gone", seen_ms=now_ms() - 120_000)
        body = page(make_client("olga", *FLEET), stream)
        fleet = element_text(body, "group-fleet")
        assert "Not paused: 1 Ackboard worker live." in fleet
        assert "not pausable 1 consumer seen recently without an Ackboard heartbeat" in fleet
        assert "foreign" in fleet and "w1" not in fleet
        rows = table_rows(body, "worker-")
        assert rows["worker-1"][0] == "w0-gone" and rows["worker-2"][0] == "w1"
        assert rows["worker-2"][1:9] == ["web-1", "4242", "0.9.0", "4", "2", "0", "10", "1"]
        assert rows["worker-2"][10] == "live" and rows["worker-2"][11] == "no"
        assert rows["worker-1"][10].startswith("stale last seen ")
        assert rows["worker-1"][10].endswith(" UTC")
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
        assert [row[11] for row in rows.values()] == ["paused", "paused", "not yet"]
        assert labelled_text(body, "Resume group")

    def test_a_reader_sees_the_banner_but_no_buttons(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        body = page(make_client("rita", "view_queues"), stream)
        assert "Not paused" in element_text(body, "group-fleet")
        for absent in ("Pause group", "Retire consumer", "retire-idle-form", "data-consumer-dialog"):
            assert absent not in body
