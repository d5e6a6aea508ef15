"""The group page is reused whole while it shows the same, and never served for another
state (base.html's ``{% fragment "page" page_key … %}`` under
``dashboard.views.pages.group_content_key``).

Each test loads the page, proves the next load is the stored rendering (it is tampered
with, and the tamper is served), then changes one thing the page shows (an ack, a new
entry, a pause, a heartbeat, a consumer's read, a failure, a reset's Undo, rates, time
passing a health threshold, another user) and checks that what is served is what a fresh
rendering says (every rendering cache bypassed), never the stored one. Per-response
values are taken out before comparing: the CSRF tokens (masked afresh in every response)
and the server's clock in base.html. One retry absorbs a second boundary crossed between
the two loads (idle times are shown as instants, rounded to the second); a stale
rendering differs every time. A reused page still carries the second it was served in, and
a flash message waiting to be shown is shown once, by a page rendered for it.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

import pytest
import redis
from django.contrib import messages
from django.contrib.messages.storage.cookie import CookieStorage
from django.core.cache import caches
from django.http import HttpResponse
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse

from dashboard.models import AuditEvent
from dashboard.rates.models import RateSample
from dashboard.templatetags.ackboard_fragments import NO_STORE, PAGES_ALIAS
from dashboard.views.pages import GROUP_CONTEXT_KEYS, group_content_key, group_context
from queue_core import control
from tests.dashboard.action_helpers import MakeClient
from tests.dashboard.test_fleet import beat
from tests.factories import indexed_failure, make_pending, make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]

_ALIASES = (PAGES_ALIAS, "page_fragments", "template_fragments")
_TAMPER = "<!-- served from the stored rendering -->"


@pytest.fixture(autouse=True)
def _empty_caches() -> Iterator[None]:
    for alias in _ALIASES:
        caches[alias].clear()
    yield
    for alias in _ALIASES:
        caches[alias].clear()


def _url(stream: str) -> str:
    return reverse("dashboard:group-detail", args=[stream, "g"])


def _normal(html: str) -> str:
    html = re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "csrf", html)
    html = re.sub(r'"X-CSRFToken": "[^"]+"', "csrf", html)
    return re.sub(r'<meta name="ackboard-now" content="\d+">', "now", html)


def _page(client: Client, stream: str) -> str:
    got = client.get(_url(stream))
    assert got.status_code == 200
    return _normal(got.content.decode())


def _fresh(client: Client, stream: str) -> str:
    """The page rendered from scratch, leaving what is stored as it is: every rendering
    cache misses and keeps nothing for this one load."""
    with contextlib.ExitStack() as stack:
        for alias in _ALIASES:
            cache = caches[alias]
            stack.enter_context(mock.patch.object(cache, "get", return_value=None))
            stack.enter_context(mock.patch.object(cache, "set"))
        return _page(client, stream)


def _stored() -> dict[str, Any]:
    """The stored renderings by cache key: each a tuple of text and placeholders."""
    cache: Any = caches[PAGES_ALIAS]
    return {key: cache.get(key.split(":", 2)[2]) for key in list(cache._cache)}


def assert_reused(client: Client, stream: str) -> str:
    """The page twice: the second load serves the stored page (a tamper shows)."""
    first = _page(client, stream)
    stored = _stored()
    assert len(stored) == 1, "the page was not stored"
    [(raw_key, parts)] = stored.items()
    caches[PAGES_ALIAS].set(raw_key.split(":", 2)[2], (*parts[:-1], parts[-1] + _TAMPER))
    second = _page(client, stream)
    assert _TAMPER in second
    assert second.replace(_TAMPER, "") == first
    return first


def assert_current(client: Client, stream: str) -> str:
    """What is served now is what a fresh rendering says."""
    served = _page(client, stream)
    fresh = _fresh(client, stream)
    if served != fresh:  # a second boundary between the two loads: once more
        served = _page(client, stream)
        fresh = _fresh(client, stream)
    assert _TAMPER not in served
    assert served == fresh
    return served


class GroupContentCacheTests:
    def test_each_change_the_page_shows_is_never_served_the_stored_content(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 5)
        client = make_client("olga", "view_queues", "retry_entry", "pause_group")
        before = assert_reused(client, stream)

        r.xack(stream, "g", ids[0])
        acked = assert_current(client, stream)
        assert acked != before and f"pending-{ids[0]}" not in acked

        make_pending(r, stream, "g", "c2", 1, create=False)  # a new consumer and entry
        grown = assert_current(client, stream)
        assert grown != acked and ">c2<" in grown

        now = int(time.time() * 1000)
        pause = control.pause_set(
            client=r, stream=stream, group="g", by="olga", reason="deploy", until_ms=None,
            now_ms=now,
        )  # fmt: skip
        paused = assert_current(client, stream)
        assert paused != grown and "deploy" in paused

        beat(r, stream, "c1", pause=pause)
        beating = assert_current(client, stream)
        assert beating != paused and 'data-worker="c1"' in beating

        time.sleep(1.1)
        make_pending(r, stream, "g", "c1", 1, create=False)  # c1 reads on
        reread = assert_current(client, stream)
        assert reread != beating

        indexed_failure(stream=stream, group="g", entry_id=ids[1], message="boom: no stock")
        failed = assert_current(client, stream)
        assert failed != reread and "boom: no stock" in failed

        RateSample.objects.create(
            tier=0, stream=stream, group="g", at=time.time() - 30, entries_added=10,
            entries_read=10, lag=0, pending=5, oldest_pending_age_s=None,
            oldest_undelivered_age_s=None, dead_letters=0, failures=0,
        )  # fmt: skip
        RateSample.objects.create(
            tier=0, stream=stream, group="g", at=time.time(), entries_added=70,
            entries_read=70, lag=0, pending=6, oldest_pending_age_s=None,
            oldest_undelivered_age_s=None, dead_letters=0, failures=0,
        )  # fmt: skip
        rated = assert_current(client, stream)
        assert rated != failed
        # And the new state is stored and reused in its turn.
        caches[PAGES_ALIAS].clear()
        assert_reused(client, stream)

    def test_the_undo_of_a_reset_shows_at_once_for_group_administrators(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        admin = make_client("ada", "view_queues", "administer_group")
        before = assert_reused(admin, stream)
        assert "reset-undo" not in before
        AuditEvent.objects.create(
            username="ada", action="reset-position", stream=stream, group="g",
            result=AuditEvent.Result.OK,
            state_before={"before_id": "0-0", "after_id": "$", "before_entries_read": 0},
        )  # fmt: skip
        after = assert_current(admin, stream)
        assert 'id="reset-undo"' in after

    def test_health_turning_with_time_alone_is_never_served_stale(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: Any
    ) -> None:
        settings.ACKBOARD_STUCK_AFTER_MS = 1500
        make_pending(r, stream, "g", "c1", 2)
        client = make_client("olga", "view_queues")
        seen = assert_reused(client, stream)
        time.sleep(1.7)  # nothing in Redis changed; c1 is no longer seen
        unseen = assert_current(client, stream)
        assert unseen != seen

    def test_a_consumer_no_longer_seen_with_time_alone_is_never_served_stale(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: Any
    ) -> None:
        settings.ACKBOARD_STUCK_AFTER_MS = 1500
        make_pending(r, stream, "g", "c1", 1)
        r.xgroup_createconsumer(stream, "g", "idler")  # holds nothing
        time.sleep(0.9)
        make_pending(r, stream, "g", "c1", 1, create=False)  # c1 seen 0.9 s after idler
        client = make_client("olga", "view_queues")
        both = assert_reused(client, stream)
        assert "2 consumers seen" in both
        time.sleep(0.8)  # idler passes 1.5 s unseen, c1 does not; the group stays OK
        one = assert_current(client, stream)
        assert "1 consumer seen" in one

    def test_a_lagging_group_is_rendered_every_time(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        r.xadd(stream, {"n": "waiting"})  # not delivered: "… behind" grows with time
        client = make_client("olga", "view_queues")
        first = _page(client, stream)
        time.sleep(0.05)
        second = _page(client, stream)
        assert _stored() == {}
        ages = [re.search(r'class="lag-age dur" data-ms="(\d+)"', p) for p in (first, second)]
        assert ages[0] and ages[1] and int(ages[1][1]) > int(ages[0][1])

    def test_each_user_and_path_gets_its_own_content(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 60)
        operator = make_client()
        reader = make_client("rita", "view_queues")
        served = _page(operator, stream)
        read_only = _page(reader, stream)
        filtered = operator.get(_url(stream), {"consumer": "c1"})
        assert filtered.status_code == 200
        assert len(_stored()) == 3  # one rendering each
        assert 'form="row-retry"' in served and 'form="row-retry"' not in read_only
        assert _page(reader, stream) == read_only == _fresh(reader, stream)
        assert _page(operator, stream) == served

    def test_idle_times_count_as_the_instants_shown(self, r: redis.Redis, stream: str) -> None:
        """Engine-independent (Redis 7.0 moves a consumer's idle time only with a delivery,
        which changes the page anyway; 7.2+ and Valkey also on an empty read)."""
        make_pending(r, stream, "g", "c1", 3)
        context = group_context(client=r, stream=stream, group="g")
        key = group_content_key(context)

        def later(ms: int, *, idle: int) -> dict[str, Any]:
            """The same state read ``ms`` later, the consumers' idle times grown by ``idle``."""
            detail = context["detail"]
            consumers = tuple(replace(c, idle_ms=c.idle_ms + idle) for c in detail.consumers)
            health = context["health"]
            return context | {
                "now_ms": context["now_ms"] + ms,
                "detail": replace(detail, consumers=consumers),
                "health": replace(health, consumers=tuple(
                    replace(h, info=replace(h.info, idle_ms=h.info.idle_ms + idle))
                    for h in health.consumers
                )),
            }  # fmt: skip

        assert group_content_key(later(5_000, idle=5_000)) == key  # nothing happened
        assert group_content_key(later(5_000, idle=0)) != key  # c1 read: a new instant
        unseen = context | {"health": replace(context["health"], consumers=tuple(
            replace(h, seen=not h.seen) for h in context["health"].consumers
        ))}  # fmt: skip
        assert group_content_key(unseen) != key

    def test_a_rendering_without_the_view_s_key_stores_nothing(
        self, r: redis.Redis, stream: str, rf: Any, django_user_model: Any
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        request = rf.get(_url(stream))
        request.user = make_user(django_user_model, "olga", "view_queues")
        context = group_context(client=r, stream=stream, group="g")  # no page_key
        html = render_to_string("dashboard/group.html", context, request=request)
        assert html.count('name="ids"') >= 2  # the page, rendered
        assert _stored() == {}

    def test_a_reused_page_carries_the_second_it_is_served_in(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        client = make_client("olga", "view_queues")
        assert_reused(client, stream)
        time.sleep(1.1)
        before = int(time.time())
        page = client.get(_url(stream)).content.decode()
        after = int(time.time())
        assert _TAMPER in page  # still the stored rendering
        clock = re.search(r'<meta name="ackboard-now" content="(\d+)">', page)
        assert clock is not None and before <= int(clock[1]) <= after

    def test_a_waiting_flash_message_is_shown_once_and_never_stored(
        self, r: redis.Redis, stream: str, make_client: MakeClient, rf: Any
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        client = make_client("olga", "view_queues")
        assert_reused(client, stream)  # stored, and tampered with
        # A flash message waits (what a plain-HTML action's redirect back leaves).
        storage = CookieStorage(rf.get("/"))
        storage.add(messages.WARNING, "Nothing to retry: flash-7f3a")
        carrier = HttpResponse()
        storage.update(carrier)
        client.cookies["messages"] = carrier.cookies["messages"].value
        shown = client.get(_url(stream)).content.decode()
        assert "flash-7f3a" in shown and _TAMPER not in shown  # rendered for the message
        assert len(_stored()) == 1  # and not stored
        again = client.get(_url(stream)).content.decode()
        assert "flash-7f3a" not in again and _TAMPER in again  # shown once; reuse resumes

    def test_the_key_lists_every_context_value(self) -> None:
        context = dict.fromkeys(GROUP_CONTEXT_KEYS) | {"novel": 1}
        with pytest.raises(ValueError, match="novel"):
            group_content_key(context)
        assert NO_STORE == "ackboard-fragment-no-store"
