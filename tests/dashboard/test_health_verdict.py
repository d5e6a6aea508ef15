"""One health verdict (``dashboard.insight.health``): the rule itself, and the overview and the
group page showing the same verdict with the same reason for the same state, in the page
and in its live push."""

from __future__ import annotations

from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
import redis
from django.test import Client
from django.urls import reverse

from dashboard.insight import health as verdicts
from dashboard.insight.health import Verdict, group_verdict, stream_verdict
from dashboard.live.registry import Surface, surface_context
from dashboard.live.render import surface_render
from dashboard.models import IndexedFailure
from queue_core import clock as queue_clock
from queue_core.health import group_health
from queue_core.keys import stream_keys
from queue_core.types import ConsumerInfo
from tests.clock import FrozenClock
from tests.factories import make_group

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("page_settings")]

T = 60_000
NOW = 10_000_000


def _liveness(*, pending: int = 0, idle_ms: int = 10, consumers: int = 1) -> Any:
    infos = [
        ConsumerInfo(f"c{i}", pending if i == 0 else 0, idle_ms, None) for i in range(consumers)
    ]
    return group_health(
        stream="s", group="g", consumers=infos, pending=pending, waiting_id=None,
        stuck_after_ms=T, now_ms=NOW,
    )  # fmt: skip


def _verdict(**kw: Any) -> Verdict:
    args: dict[str, Any] = {
        "liveness": _liveness(),
        "failures_last_hour": 0,
        "oldest_pending_ms": None,
        "consumers": 1,
        "lag": 0,
        "dlq_length": 0,
        "now_ms": NOW,
    }
    return group_verdict(**(args | kw))


class GroupVerdictTests:
    def test_quiet_group_is_ok(self) -> None:
        v = _verdict()
        assert (v.level, v.label, v.reason) == ("ok", "ok", "")

    def test_failing_at_the_mark_with_its_reason(self) -> None:
        v = _verdict(failures_last_hour=verdicts.FAILING_PER_HOUR)
        assert (v.level, v.label, v.reason) == ("bad", "failing", "100+ failures in the last hour")
        assert v.text == "failing: 100+ failures in the last hour"

    def test_fewer_failures_ask_for_attention(self) -> None:
        v = _verdict(failures_last_hour=99)
        assert (v.level, v.label, v.reason) == ("warn", "attention", "99 failures in the last hour")

    def test_consumers_come_before_failures(self) -> None:
        v = _verdict(liveness=_liveness(pending=3, idle_ms=T + 1), failures_last_hour=500)
        assert (v.level, v.label) == ("bad", "no live consumer")
        assert v.reasons[:2] == (
            "no consumer seen in 1 min while entries wait; 3 entries held by 1 consumer not "
            "seen in 1 min",
            "100+ failures in the last hour",
        )

    def test_old_pending_reason_does_not_grow_with_time(self) -> None:
        old = NOW - verdicts.OLD_PENDING_MS - 1
        a = _verdict(liveness=_liveness(pending=1), oldest_pending_ms=old)
        b = _verdict(liveness=_liveness(pending=1), oldest_pending_ms=old - 3_600_000)
        assert a == b
        assert a.reason == "the oldest pending entry was added over 5 min ago"

    def test_stream_shows_its_worst_group_unchanged(self) -> None:
        ok, warn = _verdict(), _verdict(dlq_length=2)
        failing = _verdict(failures_last_hour=150)
        s = stream_verdict(groups=[("a", ok), ("b", warn), ("c", failing)], dlq_length=2)
        assert (s.verdict, s.group) == (failing, "c")
        assert [g for g, _ in s.flagged] == ["c", "b"]
        assert "group c: 100+ failures in the last hour" in s.reasons

    def test_stream_without_groups(self) -> None:
        assert stream_verdict(groups=[], dlq_length=0).label == "no groups"
        assert stream_verdict(groups=[], dlq_length=3).verdict.level == "warn"


class _Badges(HTMLParser):
    """Every health badge of a page: (label, reason beside it), in page order. A badge is
    the ``span.badge`` of the health cell (overview) or fact (group page); its reason is
    the ``.verdict-reason`` that follows it inside the same verdict."""

    def __init__(self, within: str) -> None:
        super().__init__(convert_charrefs=True)
        self.within = within
        self.badges: list[list[str]] = []
        self._inside = 0
        self._grab: str | None = None
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if a.get("id", "") and a.get("id", "").startswith(self.within):
            self._inside = 1
            return
        if not self._inside:
            return
        self._inside += 1
        if "badge" in classes and self._grab is None:
            self.badges.append(["", ""])
            self._grab, self._depth = "label", self._inside
        elif "verdict-reason" in classes and self.badges:
            self._grab, self._depth = "reason", self._inside

    def handle_endtag(self, tag: str) -> None:
        if not self._inside:
            return
        if self._grab is not None and self._inside == self._depth:
            self._grab = None
        self._inside -= 1

    def handle_data(self, data: str) -> None:
        if self._grab == "label":
            self.badges[-1][0] += data
        elif self._grab == "reason":
            self.badges[-1][1] += data


def _badge(html: str, within: str) -> tuple[str, str]:
    """The first health badge inside the element whose id starts with ``within``."""
    parser = _Badges(within)
    parser.feed(html)
    parser.close()
    assert parser.badges, f"no badge inside #{within}…"
    label, reason = parser.badges[0]
    return " ".join(label.split()), " ".join(reason.split())


def _fail(stream: str, group: str, n: int, ago: timedelta = timedelta(minutes=1)) -> None:
    """``n`` indexed failures of ``group``, ``ago`` before the pages' clock."""
    now = queue_clock.now_utc()
    IndexedFailure.objects.bulk_create(
        IndexedFailure(
            failures_key=stream_keys(stream).failures,
            source_id=f"{i + 1}-0",
            stream=stream,
            group=group,
            entry_id=f"{i + 1}-0",
            consumer="w1",
            attempt=1,
            error_type="SMTPError",
            message="550 mailbox unavailable",
            traceback="",
            duration_ms=1.0,
            failed_at=now - ago,
        )
        for i in range(n)
    )


def _both(viewer: Client, stream: str, group: str) -> tuple[tuple[str, str], tuple[str, str]]:
    overview = viewer.get(reverse("dashboard:overview")).content.decode()
    group_page = viewer.get(reverse("dashboard:group-detail", args=[stream, group]))
    assert group_page.status_code == 200
    return _badge(overview, "stream-row-"), _badge(group_page.content.decode(), "group-health")


class SameVerdictTests:
    """The overview and the group page, for one state: the same badge, the same reason."""

    def test_failing_group(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "mailer")
        r.xadd(stream, {"to": "a@example.invalid"})
        r.xreadgroup("mailer", "w1", {stream: ">"})  # a live consumer holding one entry
        _fail(stream, "mailer", 120)
        overview, group = _both(viewer, stream, "mailer")
        assert overview == group == ("failing", "100+ failures in the last hour")

    def test_failures_of_another_group_do_not_make_this_one_fail(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        # The overview shows the worst group's verdict: its page says the same, and the
        # quiet group's page says ok (it is not the one failing).
        make_group(r, stream, "mailer")
        make_group(r, stream, "audit")
        _fail(stream, "mailer", 100)
        overview, mailer = _both(viewer, stream, "mailer")
        assert overview == mailer == ("failing", "100+ failures in the last hour")
        _, audit = _both(viewer, stream, "audit")
        assert audit == ("ok", "")

    def test_the_last_hour_ends_at_the_pages_clock(
        self, viewer: Client, r: redis.Redis, stream: str, clock: FrozenClock
    ) -> None:
        make_group(r, stream, "mailer")
        _fail(stream, "mailer", 100, ago=timedelta(minutes=59, seconds=59, milliseconds=999))
        overview, group = _both(viewer, stream, "mailer")
        assert overview == group == ("failing", "100+ failures in the last hour")
        clock.advance(2)  # now they are an hour and a millisecond old: out of the hour
        assert _both(viewer, stream, "mailer") == (("ok", ""), ("ok", ""))

    def test_attention_and_ok(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "mailer")
        assert _both(viewer, stream, "mailer") == (("ok", ""), ("ok", ""))
        _fail(stream, "mailer", 3)
        overview, group = _both(viewer, stream, "mailer")
        assert overview == group == ("attention", "3 failures in the last hour")

    def test_live_pushes_carry_the_same_verdict(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        # What the broadcaster pushes: each surface's context, rendered as its partials.
        make_group(r, stream, "mailer")
        _fail(stream, "mailer", 100)
        viewer.get(reverse("dashboard:overview"))  # builds this process's stream index
        perms = frozenset({"dashboard.view_queues"})
        pushed = {}
        for surface, partial, within in (
            (Surface("overview"), "stream-table", "stream-row-"),
            (Surface("group", stream=stream, group="mailer"), "group-summary", "group-health"),
        ):
            context = surface_context(surface=surface, client=r)
            html = surface_render(surface=surface, context=context, perms=perms)[partial]
            pushed[surface.kind] = _badge(html, within)
        assert (
            pushed["overview"] == pushed["group"] == ("failing", "100+ failures in the last hour")
        )
