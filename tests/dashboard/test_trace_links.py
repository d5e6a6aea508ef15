"""Trace links: a failure recorded inside an OpenTelemetry span carries its trace id
through ``{S}:failures`` and the failure index to the entry page, and an entry with a
``traceparent`` field links to the tracing UI by ``ACKBOARD_TRACE_URL``.

The spans are opentelemetry-api's own ``NonRecordingSpan`` made current with
``use_span``: the context a framework's instrumentation sets, without an SDK."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import redis
import redis.asyncio
from django.test import Client
from django.urls import reverse
from opentelemetry import trace
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.insight.failure_index.ingestor import failures_ingest
from queue_core.keys import stream_keys
from queue_core.recording import failure_recorded, failure_recorded_async
from queue_core.tracing import current_trace_id, trace_id_parse
from tests.factories import make_group
from tests.html import element_text

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"
URL = "https://tracing.example.test/trace/{trace_id}?from=ackboard&x=1"


def _span(trace_id: str) -> trace.Span:
    context = trace.SpanContext(
        trace_id=int(trace_id, 16), span_id=0x00F067AA0BA902B7, is_remote=False
    )
    return trace.NonRecordingSpan(context)


class TraceIdTests:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (TRACEPARENT, TRACE),
            (TRACEPARENT.upper().encode(), TRACE),
            (TRACE, TRACE),
            ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", ""),  # the invalid all-zero id
            ("00-" + TRACE + "-00f067aa0ba902b7", ""),
            ("javascript:alert(1)", ""),
            ('"><script>x</script>', ""),
            (b"\xff\xfe", ""),
            ("x" * 10_000, ""),
            ("", ""),
            (None, ""),
        ],
    )
    def test_parse(self, value: str | bytes | None, expected: str) -> None:
        assert trace_id_parse(value) == expected

    def test_current_span(self) -> None:
        assert current_trace_id() == ""
        with trace.use_span(_span(TRACE)):
            assert current_trace_id() == TRACE

    def test_without_opentelemetry_there_is_no_trace_id(self) -> None:
        # A worker without the library: the import fails, records carry no trace id.
        code = (
            "import sys; sys.modules['opentelemetry'] = None\n"
            "from queue_core.tracing import current_trace_id\n"
            "assert current_trace_id() == '' and current_trace_id() == ''\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _record_in_span(r: redis.Redis, stream: str, entry_id: str) -> None:
    def handle() -> None:
        raise RuntimeError("boom")

    recorded = failure_recorded(handle, client=r, stream=stream, group="g", consumer="c")
    with trace.use_span(_span(TRACE)), pytest.raises(RuntimeError):
        recorded(entry_id)


class RecordingTests:
    def test_a_failure_in_a_span_carries_its_trace_id(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        first = r.xadd(stream, {"n": "1"}).decode()
        second = r.xadd(stream, {"n": "2"}).decode()
        r.xreadgroup("g", "c", {stream: ">"})
        _record_in_span(r, stream, first)

        def handle() -> None:
            raise RuntimeError("no span")

        with pytest.raises(RuntimeError):
            failure_recorded(handle, client=r, stream=stream, group="g", consumer="c")(second)
        records = {
            fields[b"entry_id"].decode(): fields
            for _, fields in r.xrange(stream_keys(stream).failures)
        }
        assert records[first][b"trace_id"] == TRACE.encode()
        assert b"trace_id" not in records[second]

    def test_the_async_twin_too(self, redis_url: str, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        entry_id = r.xadd(stream, {"n": "1"}).decode()
        r.xreadgroup("g", "c", {stream: ">"})

        async def main() -> None:
            client = redis.asyncio.Redis.from_url(redis_url)

            async def handle() -> None:
                raise RuntimeError("boom")

            recorded = failure_recorded_async(
                handle, client=client, stream=stream, group="g", consumer="c"
            )
            with trace.use_span(_span(TRACE)), pytest.raises(RuntimeError):
                await recorded(entry_id)
            await client.aclose()

        asyncio.run(main())
        ((_, fields),) = r.xrange(stream_keys(stream).failures)
        assert fields[b"trace_id"] == TRACE.encode()


@pytest.mark.django_db
class EntryPageTests:
    @pytest.fixture
    def traced(self, page_settings: SettingsWrapper) -> SettingsWrapper:
        page_settings.ACKBOARD_TRACE_URL = URL
        return page_settings

    def _page(self, viewer: Client, stream: str, entry_id: str) -> str:
        response = viewer.get(reverse("dashboard:entry-detail", args=[stream, entry_id]))
        assert response.status_code == 200
        return response.content.decode()

    def test_the_failure_and_the_entry_link_to_their_trace(
        self, traced: SettingsWrapper, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, "g")
        other = "0af7651916cd43dd8448eb211c80319c"
        entry_id = r.xadd(stream, {"traceparent": f"00-{other}-b7ad6b7169203331-01"}).decode()
        r.xreadgroup("g", "c", {stream: ">"})
        _record_in_span(r, stream, entry_id)
        assert failures_ingest(client=r) == 1

        html = self._page(viewer, stream, entry_id)
        link = URL.replace("{trace_id}", "{}").replace("&", "&amp;")
        assert f'href="{link.format(other)}"' in element_text_html(html, "entry-trace")
        failure = html.split('id="failure-history"', 1)[1]
        assert f'href="{link.format(TRACE)}"' in failure
        assert 'rel="noopener noreferrer"' in failure
        assert element_text(html, "entry-trace") == f"trace {other[:8]}…"

    def test_no_url_no_link_and_a_hostile_field_is_no_link(
        self, page_settings: SettingsWrapper, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        good = r.xadd(stream, {"traceparent": TRACEPARENT}).decode()
        assert 'class="trace-link"' not in self._page(viewer, stream, good)
        page_settings.ACKBOARD_TRACE_URL = URL
        assert 'class="trace-link"' in self._page(viewer, stream, good)
        for hostile in ('"><script>alert(1)</script>', "javascript:alert(1)", "\xff" * 40):
            bad = r.xadd(stream, {"traceparent": hostile}).decode()
            html = self._page(viewer, stream, bad)
            assert 'class="trace-link"' not in html
            assert "<script>alert(1)" not in html

    def test_the_field_name_is_configurable(
        self, traced: SettingsWrapper, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        traced.ACKBOARD_TRACE_FIELD = "trace"
        entry_id = r.xadd(stream, {"traceparent": TRACEPARENT, "trace": TRACE[::-1]}).decode()
        html = self._page(viewer, stream, entry_id)
        assert element_text(html, "entry-trace") == f"trace {TRACE[::-1][:8]}…"


def element_text_html(html: str, element_id: str) -> str:
    """The markup of the element with ``element_id`` up to its closing tag (a span here)."""
    start = html.index(f'id="{element_id}"')
    return html[start : html.index("</span>", start)]


class SettingsCheckTests:
    @pytest.mark.parametrize("url", ["javascript:{trace_id}", "https://x/trace/"])
    def test_a_bad_url_is_refused_at_startup(self, url: str) -> None:
        code = "import django; django.setup()"
        env = {"DJANGO_SETTINGS_MODULE": "dashboard.settings", "DJANGO_DEBUG": "1",
               "ACKBOARD_TRACE_URL": url, "PATH": "/usr/bin:/bin"}  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode != 0
        assert "ACKBOARD_TRACE_URL must be an http(s) URL with {trace_id}" in done.stderr
