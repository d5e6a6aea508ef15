"""The group page's SQL statements and Redis round trips per request, counted: a
regression (one more query or round trip per request) fails here. A logged-in request of
the group page reads its session (the database, in tests), the user (django.contrib.auth's
get_user), its permissions (Django's ModelBackend: its own and its groups' permissions),
the page's entries' last failures, the group's failures of the last hour (the health
verdict, counted up to its mark), the rates (one statement: the latest point and the
drain estimate) and, for a group administrator, the last position reset; nothing else.
Its Redis reads are one round trip when nothing needs a follow-up."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from django.db import connection
from django.http import Http404
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard.insight.fleet import fleet_read
from dashboard.views.group_page import group_context
from queue_core import control, selectors
from tests.dashboard.action_helpers import MakeClient
from tests.dashboard.test_fleet import beat
from tests.factories import CountingRedis, age_pending, make_pending

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]


def _tables(sql: str) -> str:
    if '"auth_permission"' in sql:
        return "auth_permission"
    for table in ("django_session", "auth_user", "dashboard_indexedfailure"):
        if f'"{table}"' in sql:
            return table
    if '"dashboard_ratesample"' in sql:
        return "dashboard_ratesample"
    if '"dashboard_auditevent"' in sql:
        return "dashboard_auditevent"
    if '"dashboard_streamscope"' in sql:
        return "dashboard_streamscope"
    return sql


READS = [
    "django_session",
    "auth_user",
    "dashboard_streamscope",  # whether the user's roles reach only some streams
    "auth_permission",  # ModelBackend: the user's own permissions
    "auth_permission",  # and its groups'
    "dashboard_indexedfailure",  # the page's entries' last failures
    "dashboard_indexedfailure",  # the health verdict's failures in the last hour (capped)
    "dashboard_ratesample",
]


@pytest.mark.parametrize(
    ("codenames", "expected"),
    [
        # A reader: no group administration, so no undo of a position reset to look up.
        (("view_queues",), READS),
        (("view_queues", "administer_group"), [*READS, "dashboard_auditevent"]),
    ],
)
def test_the_group_page_statements(
    r: redis.Redis,
    stream: str,
    make_client: MakeClient,
    codenames: tuple[str, ...],
    expected: list[str],
) -> None:
    make_pending(r, stream, "g", "c1", 3)
    client = make_client("olga", *codenames)
    url = reverse("dashboard:group-detail", args=[stream, "g"])
    assert client.get(url).status_code == 200  # warm: per-process caches filled
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    tables = [_tables(q["sql"]) for q in captured.captured_queries]
    assert tables == expected


# -- Redis round trips -------------------------------------------------------------------


def _rows(context: dict[str, Any]) -> list[tuple[str, str, int, str]]:
    return [(row.id, row.consumer, row.deliveries, row.preview) for row in context["rows"]]


class GroupPageRoundTripTests:
    """The group page reads its header, pending page and fleet (pause, heartbeats) from
    Redis in one round trip (``selectors.group_page``), and what it shows is what the
    three separate reads show."""

    def test_a_backlog_with_a_paused_fleet_is_one_round_trip(
        self, r: redis.Redis, stream: str, counting: CountingRedis
    ) -> None:
        make_pending(r, stream, "g", "c1", 120)
        now = int(time.time() * 1000)
        pause = control.pause_set(
            client=r, stream=stream, group="g", by="olga", reason="deploy", until_ms=None,
            now_ms=now,
        )  # fmt: skip
        beat(r, stream, "c1", pause=pause)
        counting.round_trips = 0
        context = group_context(client=counting, stream=stream, group="g")
        assert counting.round_trips == 1
        # The same as the separate reads.
        detail = selectors.group_detail(client=r, stream=stream, group="g")
        page = selectors.pending_page(client=r, stream=stream, group="g")
        fleet = fleet_read(client=r, stream=stream, group="g")
        assert detail is not None and page is not None
        assert context["detail"].pending == detail.pending == 120
        assert context["detail"].group == detail.group
        assert [row.id for row in context["rows"]] == [row.id for row in page.rows]
        assert len(context["rows"]) == selectors.PENDING_PAGE_SIZE
        assert all(row.preview and not row.payload_missing for row in context["rows"])
        assert context["page"].next_start == page.next_start
        view = context["fleet"]
        assert fleet.pause == pause
        assert view.paused and "olga" in view.sentence and "deploy" in view.sentence
        assert [(w.beat.consumer, w.live, w.confirmed) for w in view.rows] == [("c1", True, True)]

    def test_what_one_round_trip_cannot_cover_costs_one_more(
        self, r: redis.Redis, stream: str, counting: CountingRedis
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 300)
        r.xack(stream, "g", *[i for n, i in enumerate(ids) if n % 7])  # sparse pending rows
        counting.round_trips = 0
        sparse = group_context(client=counting, stream=stream, group="g")
        assert counting.round_trips == 2  # their payloads
        assert [row[0] for row in _rows(sparse)] == ids[::7][:50]
        assert all(row.preview for row in sparse["rows"])
        r.xadd(stream, {"n": "new"})  # the group now lags: its first undelivered entry
        counting.round_trips = 0
        lagging = group_context(client=counting, stream=stream, group="g")
        assert counting.round_trips == 3
        assert lagging["detail"].oldest_undelivered_ms is not None
        counting.round_trips = 0
        idle = group_context(client=counting, stream=stream, group="g", min_idle_s=0)
        assert counting.round_trips == 3 and _rows(idle) == _rows(lagging)

    def test_an_idle_filter_reads_its_windows_after(
        self, r: redis.Redis, stream: str, counting: CountingRedis
    ) -> None:
        make_pending(r, stream, "g", "c1", 60)
        age_pending(r, stream, "g", 5_000)  # past the 1 s filter
        counting.round_trips = 0
        context = group_context(client=counting, stream=stream, group="g", min_idle_s=1)
        assert counting.round_trips == 3  # the header and fleet, one window, its payloads
        assert len(context["rows"]) == selectors.PENDING_PAGE_SIZE
        assert _rows(context) == _rows(group_context(client=r, stream=stream, group="g"))

    def test_no_such_group_or_stream_is_404(self, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(Http404):
            group_context(client=r, stream=stream, group="other")
        with pytest.raises(Http404):
            group_context(client=r, stream=stream + "-missing", group="g")

    def test_a_name_whose_keys_cannot_be_named_still_shows_its_page(
        self, r: redis.Redis, prefix: str
    ) -> None:
        stream = prefix + "a}b"  # no layout shares its slot: no fleet keys
        make_pending(r, stream, "g", "c1", 3)
        context = group_context(client=r, stream=stream, group="g")
        assert len(context["rows"]) == 3
        assert context["fleet"].problem
