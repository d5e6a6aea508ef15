"""The group page's pending table is rendered once per state (``{% cache %}`` under
``ackboard_rows.pending_table_key``) and never served for another state.

Each test loads the table (the htmx partial, as a swap and a live push get it), checks
that the next load is the cached rendering, changes one thing the table shows (an ack, a
claim, a redelivery, a retry that only resets the idle time, a new failure in the index,
another permission set, a new page of rows) and checks that what is served then is what a
fresh rendering says (the cache emptied), not the old table.

A row shows when it was delivered, to the second (``ackboard.since_ms``: the server's
clock minus the idle time Redis reports). A delivery at an arbitrary millisecond can be
rounded into one second on one read and the next second on a later read, so these tests
pin every delivery to just past a whole second (``_pin``, XCLAIM TIME): two reads of
the same state then always show the same instant, whatever the clock or the load.
"""

from __future__ import annotations

import pickle
import re
import time
from typing import Any

import pytest
import redis
from django.core.cache import caches
from django.test import Client
from django.urls import reverse

from dashboard.display.durations import since_ms
from dashboard.templatetags.ackboard import since_span
from tests.dashboard.action_helpers import MakeClient
from tests.factories import indexed_failure, make_pending

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]


@pytest.fixture(autouse=True)
def _empty_cache() -> Any:
    caches["template_fragments"].clear()
    yield
    caches["template_fragments"].clear()


def _table(client: Client, stream: str, **query: str) -> str:
    url = reverse("dashboard:group-detail", args=[stream, "g"])
    got = client.get(url, query, headers={"HX-Request": "true", "HX-Target": "pending-table"})
    assert got.status_code == 200
    html = got.content.decode()
    assert html.lstrip().startswith('<div id="pending-table"')
    return html


def _fresh(client: Client, stream: str, **query: str) -> str:
    """The table rendered from scratch now (the cache emptied first)."""
    caches["template_fragments"].clear()
    return _table(client, stream, **query)


def _pin(r: redis.Redis, stream: str, idle_s: int = 10) -> int:
    """Every pending entry of ``stream``'s group "g" delivered ``idle_s`` seconds ago, 50 ms
    past a whole second, its owner and delivery count kept (XCLAIM JUSTID TIME). A read
    sees it delivered that instant plus the time between Redis's read and the server's
    clock read, so a row's second stays the same unless that gap reaches 950 ms. Returns
    the instant (epoch ms)."""
    at = (int(time.time()) - idle_s) * 1000 + 50
    for row in r.xpending_range(stream, "g", "-", "+", 1000):
        r.xclaim(stream, "g", row["consumer"], 0, [row["message_id"]], time=at, justid=True)
    return at


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr id="pending-([^"]+)"', html)


class PendingTableCacheTests:
    def test_an_unchanged_table_is_the_cached_rendering(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 3)
        _pin(r, stream)
        client = make_client()
        first = _table(client, stream)
        cache = caches["template_fragments"]
        assert len(cache._cache) == 1  # type: ignore[attr-defined]  # LocMemCache's dict
        [(key, stored)] = cache._cache.items()  # type: ignore[attr-defined]
        # Served from the cache: a marker put into the stored rendering comes back.
        marked = pickle.loads(stored).replace("Snapshot", "Snapshot (cached)")
        cache._cache[key] = pickle.dumps(marked, pickle.HIGHEST_PROTOCOL)  # type: ignore[attr-defined]
        assert "Snapshot (cached)" in _table(client, stream)
        assert len(cache._cache) == 1  # type: ignore[attr-defined]
        assert first == _fresh(client, stream)

    def test_an_ack_a_claim_or_a_redelivery_is_never_served_the_old_table(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 4)
        _pin(r, stream)
        client = make_client()
        old = _table(client, stream)
        r.xack(stream, "g", ids[0])  # gone
        r.xclaim(stream, "g", "c2", 0, [ids[1]])  # another owner, one more delivery
        r.xreadgroup("g", "c1", {stream: "0"})  # every entry of c1 delivered again
        _pin(r, stream)  # the same instant as before: only owners and counts changed
        new = _table(client, stream)
        assert new != old
        assert new == _fresh(client, stream)
        assert _rows(new) == ids[1:]
        assert 'data-consumer="c2" ' in new and 'data-deliveries="2"' in new

    def test_a_retry_that_only_resets_the_idle_time_changes_the_table(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        _pin(r, stream, idle_s=3_600)
        client = make_client()
        old = _table(client, stream)
        assert "already due" in old
        # Same owner, same delivery count (JUSTID): only when it was delivered changed.
        _pin(r, stream, idle_s=10)
        new = _table(client, stream)
        assert new != old and "already due" not in new
        assert new == _fresh(client, stream)

    def test_a_new_failure_is_never_served_the_old_table(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        _pin(r, stream)
        client = make_client()
        old = _table(client, stream)
        indexed_failure(stream=stream, group="g", entry_id=entry_id, message="boom: no stock")
        new = _table(client, stream)
        assert new != old and 'title="boom: no stock"' in new
        assert new == _fresh(client, stream)

    def test_each_permission_set_gets_its_own_table(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        _pin(r, stream)
        operator = _table(make_client(), stream)
        reader = make_client("rita", "view_queues")
        retrier = make_client("rex", "view_queues", "retry_entry")
        assert 'form="row-retry"' in operator and "data-row-dialog" in operator
        read_only = _table(reader, stream)
        assert "row-retry" not in read_only and "data-row-dialog" not in read_only
        retry_only = _table(retrier, stream)
        assert 'form="row-retry"' in retry_only and "data-row-dialog" not in retry_only
        assert read_only == _fresh(reader, stream)
        assert retry_only == _fresh(retrier, stream)

    def test_another_page_or_filter_is_another_table(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 3) + make_pending(r, stream, "g", "c2", 2)
        _pin(r, stream)
        client = make_client()
        assert _rows(_table(client, stream)) == ids
        assert _rows(_table(client, stream, start=ids[2])) == ids[3:]
        assert _rows(_table(client, stream, consumer="c2")) == ids[3:]
        assert 'data-live="off"' in _table(client, stream, consumer="c2")
        assert _rows(_table(client, stream)) == ids


class SinceTests:
    def test_the_instant_is_rounded_up_to_the_second(self) -> None:
        assert since_ms(1_500, 10_000) == 9_000
        assert since_ms(1_000, 10_000) == 9_000
        assert since_ms(999, 10_000) == 10_000  # never later than the true idle time says
        assert since_ms(0, 10_001) == 11_000

    def test_the_rows_show_when_they_were_delivered_not_how_long_ago(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        at = _pin(r, stream, idle_s=7_200)
        html = _table(make_client(), stream)
        [delivered] = re.findall(r'data-delivered="(\d+)"', html)
        assert int(delivered) == at - 50 + 1_000  # the delivery instant, rounded up
        assert str(since_span(int(delivered))) in html
        assert "data-idle-ms" not in html  # the HTML no longer changes every millisecond

    def test_since_span_markup(self) -> None:
        html = str(since_span(1_764_620_000_123, "added", ago=True))
        assert html == (
            '<span class="dur" data-since="1764620000123" data-prefix="added" data-ago>'
            "added at 2025-12-01 20:13:20 UTC</span>"
        )
        html = str(since_span(1_764_620_000_000, "<b>"))
        assert html.startswith(
            '<span class="dur" data-since="1764620000000" data-prefix="&lt;b&gt;">'
        )
        assert html.endswith(">&lt;b&gt; since 2025-12-01 20:13:20 UTC</span>")
        assert str(since_span(None)) == '<span class="muted">—</span>'
