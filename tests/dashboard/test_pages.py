"""The read pages over HTTP on real Redis: content, access, bad input and Redis outages."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
import redis
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dashboard.models import IndexedFailure
from dashboard.views.group_page import PendingRowView
from queue_core import services
from queue_core.keys import MAX_NAME_LENGTH, stream_keys
from tests.factories import add_entries, make_group, make_pending
from tests.html import table_rows
from tests.redis_server import RedisServer, free_port

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def pages(settings: Any, redis_url: str, prefix: str) -> Any:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    return settings


def _failure(stream: str, group: str, entry_id: str, attempt: int, message: str) -> None:
    IndexedFailure.objects.create(
        failures_key=stream_keys(stream).failures,
        source_id=f"{attempt}-{entry_id}",
        stream=stream,
        group=group,
        entry_id=entry_id,
        consumer="w1",
        attempt=attempt,
        error_type="ValueError",
        message=message,
        traceback="Traceback (most recent call last):\n  boom",
        duration_ms=12.5,
        failed_at=timezone.now() - timedelta(minutes=5 - attempt),
    )


class AccessTests:
    def test_login_required(self, client: Client, pages: Any, stream: str) -> None:
        for url in (
            reverse("dashboard:overview"),
            reverse("dashboard:stream-detail", args=[stream]),
        ):
            response = client.get(url)
            assert response.status_code == 302
            assert response["Location"].startswith(reverse("login"))

    def test_view_permission_required(
        self, client: Client, django_user_model: Any, pages: Any
    ) -> None:
        client.force_login(django_user_model.objects.create_user("nobody", password="pw"))
        response = client.get(reverse("dashboard:overview"))
        assert response.status_code == 403
        assert b"Not allowed" in response.content

    def test_superuser_may_read(
        self, client: Client, django_user_model: Any, pages: Any, r: redis.Redis, stream: str
    ) -> None:
        add_entries(r, stream, 1)
        client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
        assert client.get(reverse("dashboard:overview")).status_code == 200


class OverviewTests:
    def test_lists_streams_with_figures(
        self, viewer: Client, r: redis.Redis, stream: str, prefix: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c", 3)
        services.entry_dead_letter(
            client=r, stream=stream, group="g", entry_id=ids[0], reason="x", operator="op"
        )
        _failure(stream, "g", ids[1], 1, "boom")
        add_entries(r, prefix + "quiet", 1)
        response = viewer.get(reverse("dashboard:overview"))
        assert response.status_code == 200
        rows = {row.name: row for row in response.context["rows"]}
        assert set(rows) == {stream, prefix + "quiet"}
        row = rows[stream]
        assert (row.summary.length, row.summary.pending, row.summary.dlq_length) == (3, 2, 1)
        assert row.failures_last_hour == 1
        assert row.health.level == "warn"
        assert rows[prefix + "quiet"].health.label == "no groups"
        assert reverse("dashboard:stream-detail", args=[stream]).encode() in response.content

    def test_companions_are_not_queues(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        add_entries(r, stream, 1)
        r.xadd(stream_keys(stream).dlq, {"a": "1"})
        r.xadd(stream_keys(stream).failures, {"a": "1"})
        # A hash-tagged stream's companions start with "{": widen the allowlist to see them.
        from django.conf import settings

        settings.ACKBOARD_STREAMS = (stream + "*", "{" + stream + "}*")
        response = viewer.get(reverse("dashboard:overview"))
        assert [row.name for row in response.context["rows"]] == [stream]
        assert response.context["index"].companions == 2
        assert b"2 companion streams" in response.content

    def test_stream_outside_allowlist_is_hidden(
        self, viewer: Client, r: redis.Redis, prefix: str
    ) -> None:
        outside = "outside-" + prefix
        add_entries(r, outside, 1)
        try:
            response = viewer.get(reverse("dashboard:overview"))
            assert outside.encode() not in response.content
        finally:
            r.delete(outside)

    def test_old_pending_entry_asks_for_attention(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        # Added an hour ago but delivered just now to a live consumer: old, not stuck
        # ("stuck" comes from the consumers: tests/dashboard/test_health_pages.py).
        make_group(r, stream, "g")
        r.xadd(stream, {"a": "1"}, id=f"{int(time.time() * 1000) - 3_600_000}-0")
        r.xreadgroup("g", "c", {stream: ">"})
        response = viewer.get(reverse("dashboard:overview"))
        (row,) = response.context["rows"]
        assert (row.health.level, row.health.label) == ("warn", "attention")
        assert any("oldest pending entry was added" in r for r in row.health.reasons)

    def test_index_cap_is_reported(self, viewer: Client, r: redis.Redis, prefix: str) -> None:
        # ACKBOARD_MAX_STREAMS is now a safety cap on the stream index (100,000 by
        # default); below it every stream is reachable by paging (test_overview_paging).
        from django.conf import settings

        settings.ACKBOARD_MAX_STREAMS = 2
        for i in range(4):
            add_entries(r, f"{prefix}s{i}", 1)
        response = viewer.get(reverse("dashboard:overview"))
        assert len(response.context["rows"]) == 2
        assert b"The stream index is full at 2 names" in response.content

    def test_htmx_gets_the_partial(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        add_entries(r, stream, 1)
        response = viewer.get(
            reverse("dashboard:overview"),
            headers={"HX-Request": "true", "HX-Target": "stream-table"},
        )
        html = response.content.decode()
        assert html.lstrip().startswith('<div id="stream-table">')
        assert "<html" not in html
        assert "HX-Request" in response["Vary"]


class StreamPageTests:
    def test_facts_groups_and_entries(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "billing", "c", 25)
        response = viewer.get(reverse("dashboard:stream-detail", args=[stream]))
        assert response.status_code == 200
        html = response.content.decode()
        for partial in ('id="stream-facts"', 'id="group-table"', 'id="entry-table"'):
            assert partial in html
        assert reverse("dashboard:group-detail", args=[stream, "billing"]) in html
        assert [e.id for e in response.context["entries"]] == ids[::-1][:20]
        assert f'data-copy="{ids[-1]}"' in html

    def test_older_entries_page(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        ids = add_entries(r, stream, 25)
        url = reverse("dashboard:stream-detail", args=[stream])
        first = viewer.get(url)
        older = viewer.get(
            url,
            {"before": first.context["entry_page"].next_before},
            headers={"HX-Request": "true", "HX-Target": "entry-table"},
        )
        html = older.content.decode()
        assert html.lstrip().startswith('<div id="entry-table" data-live="off"')
        assert all(f'data-copy="{i}"' in html for i in ids[:5])
        assert not any(f'data-copy="{i}"' in html for i in ids[5:])


class GroupPageTests:
    def test_consumers_and_pending_rows(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 3)
        make_pending(r, stream, "g", "c2", 1, create=False)
        _failure(stream, "g", ids[0], 1, "first try failed")
        _failure(stream, "g", ids[0], 2, "card declined <b>again</b>")
        response = viewer.get(reverse("dashboard:group-detail", args=[stream, "g"]))
        assert response.status_code == 200
        ctx = response.context
        assert ctx["stream"] == stream and ctx["group"] == "g"
        assert ctx["snapshot_id"] == r.xinfo_stream(stream)["last-generated-id"].decode()
        row = ctx["rows"][0]
        assert isinstance(row, PendingRowView)
        assert (row.id, row.consumer, row.deliveries) == (ids[0], "c1", 1)
        assert row.idle_ms >= 0
        assert row.last_failure == "card declined <b>again</b>"
        assert row.preview.startswith("n=0")
        html = response.content.decode()
        for partial in ('id="group-summary"', 'id="consumer-table"', 'id="pending-table"'):
            assert partial in html
        assert f'<input type="checkbox" name="ids" value="{ids[0]}" form="bulk-form"' in html
        assert "card declined &lt;b&gt;again&lt;/b&gt;" in html
        assert {c.name for c in ctx["detail"].consumers} == {"c1", "c2"}

    def test_pages_by_start_id(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c", 60)
        url = reverse("dashboard:group-detail", args=[stream, "g"])
        first = viewer.get(url)
        assert len(first.context["rows"]) == 50
        assert first.context["page"].next_start == ids[49]
        second = viewer.get(
            url, {"start": ids[49]}, headers={"HX-Request": "true", "HX-Target": "pending-table"}
        )
        html = second.content.decode()
        assert html.count('name="ids"') == 10
        assert f'value="{ids[50]}"' in html and f'value="{ids[49]}"' not in html
        assert html.lstrip().startswith('<div id="pending-table" data-live="off"')
        assert "First page" in html

    def test_filters_by_consumer_and_idle(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "c1", 5)
        mine = make_pending(r, stream, "g", "c2", 3, create=False)
        r.xclaim(stream, "g", "c2", 0, [mine[1]], idle=7_200_000, justid=True)
        url = reverse("dashboard:group-detail", args=[stream, "g"])
        by_consumer = viewer.get(url, {"consumer": "c2"})
        assert [row.id for row in by_consumer.context["rows"]] == mine
        idle = viewer.get(url, {"min_idle": "3600"})
        assert [row.id for row in idle.context["rows"]] == [mine[1]]
        assert b"Looked at 8 pending entries" in idle.content

    def test_pending_entries_come_before_consumers_workers_and_charts(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        """What on-call opens the page for first: under the header (summary, pause
        banner), the pending table; then who holds it; then the rates."""
        make_pending(r, stream, "g", "c1", 2)
        html = viewer.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
        regions = ["group-fleet", "group-summary", "pending-table", "consumer-table",
                   "group-workers", "rate-charts"]  # fmt: skip
        at = [html.index(f'id="{region}"') for region in regions]
        assert at == sorted(at), dict(zip(regions, at, strict=True))

    def test_payload_missing_is_marked(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c", 1)
        r.xdel(stream, ids[0])
        response = viewer.get(reverse("dashboard:group-detail", args=[stream, "g"]))
        assert response.context["rows"][0].payload_missing
        assert b"payload missing" in response.content


class EntryPageTests:
    def test_fields_state_and_failure_history(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c", 1)
        make_group(r, stream, "later", start="$")
        _failure(stream, "g", ids[0], 1, "timeout talking to <api>")
        _failure(stream, "g", ids[0], 2, "still down")
        response = viewer.get(reverse("dashboard:entry-detail", args=[stream, ids[0]]))
        assert response.status_code == 200
        html = response.content.decode()
        assert 'id="entry-state"' in html and 'id="failure-history"' in html
        assert '<section id="entry-audit">' in html
        states = {s.group: s for s in response.context["states"]}
        assert states["g"].state == "pending" and states["g"].row.consumer == "c"
        assert states["later"].state == "acked"  # created at $: the entry is behind it
        assert [f.attempt for f in response.context["failures"]] == [1, 2]
        assert "timeout talking to &lt;api&gt;" in html
        assert "Traceback (most recent call last)" in html
        assert "&quot;n&quot;: 0" in html  # the JSON payload, pretty-printed

    def test_trimmed_pending_entry_still_has_a_page(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c", 1)
        r.xdel(stream, ids[0])
        response = viewer.get(reverse("dashboard:entry-detail", args=[stream, ids[0]]))
        assert response.status_code == 200
        assert b"payload missing" in response.content


class DeadLetterPageTests:
    def test_rows_and_paging(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c", 55)
        for entry_id in ids:
            services.entry_dead_letter(
                client=r,
                stream=stream,
                group="g",
                entry_id=entry_id,
                reason="too many deliveries",
                last_error="KeyError: 'sku'",
                operator="",
            )
        url = reverse("dashboard:dlq", args=[stream])
        response = viewer.get(url)
        assert response.status_code == 200
        rows = response.context["rows"]
        assert len(rows) == 50
        assert rows[0].row.origin_id == ids[-1]
        html = response.content.decode()
        assert 'id="dlq-table"' in html
        assert "too many deliveries" in html and "KeyError: &#x27;sku&#x27;" in html
        older = viewer.get(url, {"before": response.context["page"].next_before})
        assert [d.row.origin_id for d in older.context["rows"]] == ids[4::-1]

    def test_a_last_error_the_reason_repeats_is_shown_once(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        """Reason and last error share one cell; the error joins it only when it says
        something the reason does not (a permanent failure's reason repeats its message)."""
        ids = make_pending(r, stream, "g", "c", 3)
        cases = [
            ("permanent failure: 550 no mailbox", "PermanentFailure: 550 no mailbox"),
            ("max deliveries (5) reached", "ValueError: amount must be positive"),
            ("operator's call", ""),
        ]  # fmt: skip
        for entry_id, (reason, error) in zip(ids, cases, strict=True):
            services.entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id,
                                       reason=reason, last_error=error)  # fmt: skip
        response = viewer.get(reverse("dashboard:dlq", args=[stream]))
        rows = response.context["rows"]
        shown = {d.row.origin_id: d.last_error_adds for d in rows}
        assert shown == {ids[0]: False, ids[1]: True, ids[2]: False}
        cells = table_rows(response.content.decode(), "dlq-")
        why = {d.row.origin_id: cells[f"dlq-{d.row.id}"][4] for d in rows}
        assert why == {
            ids[0]: "permanent failure: 550 no mailbox",
            ids[1]: "max deliveries (5) reached · ValueError: amount must be positive",
            ids[2]: "operator's call",
        }


ODD_NAMES = [
    "with space",
    "ünïcödé-流",
    "{braces}",
    "a}b{",
    "slash/inside",
    "percent%2Fname",
    "x" * 1000,
]


class BadInputTests:
    @pytest.mark.parametrize("suffix", ODD_NAMES)
    def test_unknown_odd_names_are_404(self, viewer: Client, prefix: str, suffix: str) -> None:
        name = prefix + suffix
        for url in (
            reverse("dashboard:stream-detail", args=[name]),
            reverse("dashboard:group-detail", args=[name, suffix]),
            reverse("dashboard:entry-detail", args=[name, "1-0"]),
            reverse("dashboard:dlq", args=[name]),
        ):
            response = viewer.get(url)
            assert response.status_code == 404, url
            assert b"Not found" in response.content

    @pytest.mark.parametrize("suffix", ODD_NAMES)
    def test_existing_odd_names_render(
        self, viewer: Client, r: redis.Redis, prefix: str, suffix: str
    ) -> None:
        name = prefix + suffix
        ids = make_pending(r, name, suffix, "c", 1)
        try:
            for url in (
                reverse("dashboard:stream-detail", args=[name]),
                reverse("dashboard:group-detail", args=[name, suffix]),
                reverse("dashboard:entry-detail", args=[name, ids[0]]),
            ):
                response = viewer.get(url)
                assert response.status_code == 200, url
                assert response.context["stream"] == name
        finally:
            r.delete(name)

    def test_name_too_long_is_400(self, viewer: Client, prefix: str) -> None:
        name = prefix + "x" * MAX_NAME_LENGTH
        response = viewer.get(reverse("dashboard:stream-detail", args=[name]))
        assert response.status_code == 400
        assert b"Bad request" in response.content

    def test_nul_in_name_is_400(self, viewer: Client, prefix: str) -> None:
        response = viewer.get(reverse("dashboard:stream-detail", args=[prefix + "a\x00b"]))
        assert response.status_code == 400

    def test_outside_allowlist_is_404(self, viewer: Client, r: redis.Redis, prefix: str) -> None:
        outside = "outside-" + prefix
        ids = make_pending(r, outside, "g", "c", 1)
        try:
            for url in (
                reverse("dashboard:stream-detail", args=[outside]),
                reverse("dashboard:group-detail", args=[outside, "g"]),
                reverse("dashboard:entry-detail", args=[outside, ids[0]]),
                reverse("dashboard:dlq", args=[outside]),
            ):
                assert viewer.get(url).status_code == 404, url
        finally:
            r.delete(outside)

    def test_companion_has_no_page_of_its_own(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        from django.conf import settings

        settings.ACKBOARD_STREAMS = ("*",)
        dlq = stream_keys(stream).dlq
        r.xadd(dlq, {"a": "1"})
        assert viewer.get(reverse("dashboard:stream-detail", args=[dlq])).status_code == 404

    def test_unknown_group_and_entry_are_404(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "c", 1)
        assert (
            viewer.get(reverse("dashboard:group-detail", args=[stream, "nope"])).status_code == 404
        )
        assert (
            viewer.get(reverse("dashboard:entry-detail", args=[stream, "1-1"])).status_code == 404
        )

    @pytest.mark.parametrize(
        "bad", ["abc", "1-", "-1", "1-2-3", "99999999999999999999999-0", "1.5"]
    )
    def test_malformed_ids_are_400(
        self, viewer: Client, r: redis.Redis, stream: str, bad: str
    ) -> None:
        make_pending(r, stream, "g", "c", 1)
        # Typed by hand: reverse() makes links only to ids the page accepts.
        stream_page = reverse("dashboard:stream-detail", args=[stream])
        response = viewer.get(f"{stream_page}entries/{quote(bad, safe='')}/")
        assert response.status_code == 400
        assert b"is not a stream id" in response.content or b"not a stream id" in response.content
        group_url = reverse("dashboard:group-detail", args=[stream, "g"])
        assert viewer.get(group_url, {"start": bad}).status_code == 400
        assert (
            viewer.get(reverse("dashboard:dlq", args=[stream]), {"before": bad}).status_code == 400
        )

    @pytest.mark.parametrize("bad", ["-5", "abc", "1e3", "9" * 30])
    def test_malformed_idle_filter_is_400(
        self, viewer: Client, r: redis.Redis, stream: str, bad: str
    ) -> None:
        make_pending(r, stream, "g", "c", 1)
        url = reverse("dashboard:group-detail", args=[stream, "g"])
        assert viewer.get(url, {"min_idle": bad}).status_code == 400


class PayloadEscapingTests:
    def test_html_and_js_in_fields_show_as_text(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, "g")
        evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
        entry_id = r.xadd(stream, {"note": evil, evil: "name too"}).decode()
        r.xreadgroup("g", "c", {stream: ">"})
        for url in (
            reverse("dashboard:entry-detail", args=[stream, entry_id]),
            reverse("dashboard:group-detail", args=[stream, "g"]),
            reverse("dashboard:stream-detail", args=[stream]),
        ):
            html = viewer.get(url).content.decode()
            assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html, url
            assert "<script>alert" not in html, url
            assert "<img src=x" not in html, url

    def test_binary_and_secrets(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        entry_id = r.xadd(
            stream,
            {"blob": b"\xff\xfe\x00raw", "api_token": "s3cr3t", "payload": '{"password": "p4ss"}'},
        ).decode()
        html = viewer.get(
            reverse("dashboard:entry-detail", args=[stream, entry_id])
        ).content.decode()
        assert "\\xff\\xfe\\x00raw" in html
        assert "s3cr3t" not in html and "p4ss" not in html
        assert "redacted" in html


class RedisOutageTests:
    def _use(self, settings: Any, url: str) -> None:
        settings.ACKBOARD_REDIS_URL = url
        settings.ACKBOARD_REDIS_TIMEOUT = 0.5

    def test_unreachable_redis_shows_banner(self, viewer: Client, settings: Any) -> None:
        self._use(settings, f"redis://127.0.0.1:{free_port()}/0")
        started = time.monotonic()
        response = viewer.get(reverse("dashboard:overview"))
        assert time.monotonic() - started < 3
        assert response.status_code == 503
        assert b"Redis is unreachable." in response.content
        assert b'id="error-banner"' in response.content

    def test_htmx_request_gets_banner_retargeted(self, viewer: Client, settings: Any) -> None:
        self._use(settings, f"redis://127.0.0.1:{free_port()}/0")
        response = viewer.get(
            reverse("dashboard:overview"),
            headers={"HX-Request": "true", "HX-Target": "stream-table"},
        )
        assert response.status_code == 503
        assert response["HX-Retarget"] == "#messages"
        assert response["HX-Reswap"] == "innerHTML"
        html = response.content.decode()
        assert html.lstrip().startswith('<div class="flash flash-error" id="error-banner"')

    def test_slow_redis_times_out_with_banner(self, viewer: Client, settings: Any) -> None:
        server = RedisServer().start()
        try:
            self._use(settings, server.url)
            assert server.proc is not None
            os.kill(server.proc.pid, signal.SIGSTOP)  # accepts connections, never answers
            try:
                started = time.monotonic()
                response = viewer.get(reverse("dashboard:overview"))
                took = time.monotonic() - started
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            assert response.status_code == 503
            assert b"Redis did not answer in time." in response.content
            assert took < 3
        finally:
            server.cleanup()
