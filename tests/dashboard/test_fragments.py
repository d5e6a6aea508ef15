"""``{% fragment %}`` (dashboard/templatetags/ackboard_fragments.py): the group page's
forms and dialogs are rendered once and reused, yet every response carries its own
request's CSRF token, and a rendering is never served for another user, permission set,
path, setting or for a change in what the region shows.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import redis
from django.core.cache import caches
from django.middleware import csrf
from django.template import Context, RequestContext, Template
from django.test import Client
from django.urls import reverse

from dashboard.live import registry
from dashboard.live.render import surface_render
from dashboard.templatetags import ackboard_fragments
from queue_core import control
from tests.dashboard.action_helpers import MakeClient
from tests.factories import make_pending, make_user
from tests.html import element_text, labelled_text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]

_TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@pytest.fixture(autouse=True)
def _empty_cache() -> Any:
    for alias in ("page_fragments", "template_fragments"):
        caches[alias].clear()
    yield
    for alias in ("page_fragments", "template_fragments"):
        caches[alias].clear()


def _page(client: Client, stream: str, **query: str) -> str:
    got = client.get(reverse("dashboard:group-detail", args=[stream, "g"]), query)
    assert got.status_code == 200
    return got.content.decode()


def _fragment_keys() -> list[str]:
    cache = caches["page_fragments"]
    return [k for k in cache._cache if "ackboard.fragment." in k]  # type: ignore[attr-defined]


class CsrfTests:
    def test_every_response_carries_its_own_token_in_the_reused_forms(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        client = make_client()
        first = _page(client, stream)
        stored = len(_fragment_keys())
        assert stored >= 4, "the row forms, admin, bulk bar, find and fleet are stored"
        second = _page(client, stream)
        assert len(_fragment_keys()) == stored, "the second page reused every rendering"

        secret = client.cookies["csrftoken"].value
        for page in (first, second):
            tokens = _TOKEN.findall(page)
            assert len(tokens) >= 5  # logout, the row forms and dialogs, the bulk bar
            assert ackboard_fragments._TOKEN_PLACEHOLDER not in page
            # Each is the session's secret, masked: what CsrfViewMiddleware accepts.
            assert {csrf._unmask_cipher_token(t) for t in tokens} == {secret}  # type: ignore[attr-defined]
        assert set(_TOKEN.findall(first)).isdisjoint(_TOKEN.findall(second)), (
            "masked afresh in each response"
        )

    def test_a_post_with_the_token_of_a_reused_form_is_accepted(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = make_client(enforce_csrf_checks=True)
        _page(client, stream)
        page = _page(client, stream)  # served from the stored renderings
        token = _TOKEN.findall(page)[-1]
        url = reverse("dashboard:entry-action", args=[stream, "g", entry_id, "retry"])
        done = client.post(url, {"csrfmiddlewaretoken": token, "seen_consumer": "c1"})
        assert done.status_code in (200, 302, 303), done.content[:300]
        refused = client.post(url, {"csrfmiddlewaretoken": "x" * 64, "seen_consumer": "c1"})
        assert refused.status_code == 403


class KeyTests:
    def test_another_user_or_permission_set_never_gets_a_stored_rendering(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        operator = _page(make_client("olga"), stream)
        assert "Claim entry" in operator and 'id="bulk-form"' in operator
        viewer = _page(make_client("vera", "view_queues"), stream)
        assert "Claim entry" not in viewer and 'id="bulk-form"' not in viewer
        other = _page(make_client("otto"), stream)
        assert 'aria-label="Claim entry"' in other
        assert "olga" not in element_text(other, "row-action-forms")

    def test_the_path_is_part_of_the_key(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        client = make_client()
        _page(client, stream)
        page = _page(client, stream, consumer="c1")
        nexts = set(re.findall(r'name="next" value="([^"]+)"', page))
        assert nexts and all("consumer=c1" in n for n in nexts), nexts

    def test_the_delete_dialog_follows_the_pending_count(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        client = make_client("olga", "view_queues", "administer_group")
        assert "its 2 pending entries" in labelled_text(
            _page(client, stream), "Delete the consumer group"
        )
        make_pending(r, stream, "g", "c1", 1, create=False)
        assert "its 3 pending entries" in labelled_text(
            _page(client, stream), "Delete the consumer group"
        )

    def test_the_pause_banner_follows_the_pause(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        client = make_client("olga", "view_queues", "pause_group")
        assert "Resume group" not in _page(client, stream)
        control.pause_set(
            client=r, stream=stream, group="g", by="ops", reason="deploy", until_ms=None,
            now_ms=int(time.time() * 1000),
        )  # fmt: skip
        page = _page(client, stream)
        assert "Resume group" in page
        assert "paused by ops" in element_text(page, "group-fleet").lower()

    def test_a_changed_setting_empties_the_stored_renderings(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: Any
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        client = make_client()
        to = re.compile(r'<input type="text" name="consumer" value="([^"]*)"')
        _page(client, stream)
        assert to.findall(_page(client, stream)) == ["ackboard-operator"]  # stored, reused
        settings.ACKBOARD_OPERATOR_CONSUMER = "night-shift"
        assert to.findall(_page(client, stream)) == ["night-shift"]


class WithoutRequestTests:
    def test_a_rendering_without_a_request_is_never_stored(self) -> None:
        template = Template(
            "{% load ackboard_fragments %}{% fragment 'x' v %}<b>{{ v }}</b>{% endfragment %}"
        )
        assert template.render(Context({"v": "<1>"})) == "<b>&lt;1&gt;</b>"
        assert _fragment_keys() == []

    def test_a_live_push_rendering_is_never_stored(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        surface = registry.Surface("group", stream=stream, group="g")
        context = registry.surface_context(surface=surface, client=r)
        perms = frozenset({"dashboard.view_queues", "dashboard.pause_group"})
        html = surface_render(surface=surface, context=context, perms=perms)
        assert "Pause group" in html["group-fleet"]
        assert "csrfmiddlewaretoken" not in html["group-fleet"]
        assert _fragment_keys() == []


class ClockTests:
    def test_every_response_carries_the_second_it_is_served_in_nested_regions_too(
        self, rf: Any, django_user_model: Any
    ) -> None:
        """``{% server_clock %}`` in a region inside another: whichever of the two is
        served from its cache, the clock is the response's own."""
        template = Template(
            "{% load ackboard_fragments %}"
            "{% fragment 'outer' 1 using 'page_renderings' %}<o>"
            "{% fragment 'inner' 1 %}<i>{% server_clock %}</i>{% endfragment %}"
            "</o>{% endfragment %}"
        )
        request = rf.get("/somewhere/")
        request.user = make_user(django_user_model, "olga", "view_queues")

        def served_now() -> bool:
            before = int(time.time())
            html = template.render(RequestContext(request, {"csrf_token": "token"}))
            after = int(time.time())
            clock = re.fullmatch(r"<o><i>(\d+)</i></o>", html)
            assert clock is not None, html
            return before <= int(clock[1]) <= after

        caches["page_renderings"].clear()
        assert served_now()  # both stored now
        time.sleep(1.1)
        assert served_now()  # the outer served from its cache
        caches["page_renderings"].clear()
        assert served_now()  # the outer stored again, around the inner's stored one
        time.sleep(1.1)
        assert served_now()
        assert len(_fragment_keys()) == 1
        caches["page_renderings"].clear()


class WithoutTheCacheTests:
    def test_settings_without_the_fragments_cache_render_the_page_as_usual(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: Any
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        settings.CACHES = {
            k: v for k, v in settings.CACHES.items() if k != ackboard_fragments.CACHE_ALIAS
        }
        page = _page(make_client(), stream)
        assert 'aria-label="Claim entry"' in page
        assert ackboard_fragments._TOKEN_PLACEHOLDER not in page
