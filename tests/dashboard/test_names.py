"""Every listed name opens its own page, or is listed with the reason it can't.

A stream or group called ``.`` or ``..`` used to link to ``/streams/./``, which a browser
resolves (RFC 3986 dot-segment removal, as ``urljoin`` does) to another page; a name
longer than a URL may carry was listed with a link that answered 400.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import unquote, urljoin

import pytest
import redis
from django.test import Client
from django.urls import NoReverseMatch, resolve, reverse
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.display.converters import MAX_SEGMENT_BYTES, name_problem, name_segment
from dashboard.models import IndexedFailure
from dashboard.routing import live_path
from queue_core.keys import MAX_NAME_LENGTH, stream_keys
from queue_core.services import entry_dead_letter
from tests.factories import make_group, make_pending

pytestmark = pytest.mark.django_db

BASE = "http://testserver"
#: Path segments a browser treats as dot segments (WHATWG URL: "." or "%2e", any case).
DOT_SEGMENTS = {".", "..", "%2e", ".%2e", "%2e.", "%2e%2e"}
TOKENS = [".", "..", "/", "%", "%2E", "%2e", "%25", "%2F", "a", "流", " ", "?", "#", "\n"]
names = st.one_of(
    st.lists(st.sampled_from(TOKENS), min_size=1, max_size=5).map("".join),
    st.text(min_size=1, max_size=30),
)


def _segments(url: str) -> list[str]:
    return url.split("?")[0].split("/")


def _lands_on_itself(href: str, page: str) -> None:
    """The href, followed from ``page`` as a browser would, is the same URL."""
    assert urljoin(BASE + page, href) == BASE + href, href
    assert not {s.lower() for s in _segments(href)} & DOT_SEGMENTS, href


class RoundTripTests:
    @settings(max_examples=300)
    @given(names, names)
    def test_every_addressable_name_round_trips(self, stream: str, group: str) -> None:
        if name_problem(stream) or name_problem(group):
            return
        for route, args, kwargs in (
            ("dashboard:stream-detail", [stream], {"stream": stream}),
            ("dashboard:dlq", [stream], {"stream": stream}),
            ("dashboard:group-detail", [stream, group], {"stream": stream, "group": group}),
            ("dashboard:entry-detail", [stream, "1-0"], {"stream": stream, "entry_id": "1-0"}),
        ):
            href = reverse(route, args=args)
            _lands_on_itself(href, "/streams/x/groups/y/")
            # The server decodes the path once before routing, as WSGI and ASGI do.
            match = resolve(unquote(href))
            assert (match.view_name, match.kwargs) == (route, kwargs)
        socket = live_path("group", stream=stream, group=group)
        _lands_on_itself(socket, "/ws/overview/")

    @pytest.mark.parametrize("name", [".", "..", "%2E", "%2E%2E", ".%2E", "./..", "..."])
    def test_dot_names_get_links_browsers_keep(self, name: str) -> None:
        href = reverse("dashboard:group-detail", args=[name, name])
        _lands_on_itself(href, "/")
        assert resolve(unquote(href)).kwargs == {"stream": name, "group": name}

    def test_entry_links_are_made_only_for_ids_the_page_accepts(self) -> None:
        assert reverse("dashboard:entry-detail", args=["s", "17-3"]) == "/streams/s/entries/17-3/"
        for bad in ("..", ".", "1-0/..", "abc"):
            with pytest.raises(NoReverseMatch):
                reverse("dashboard:entry-detail", args=["s", bad])

    def test_name_problems(self) -> None:
        assert name_problem("orders") is None
        assert name_problem("x" * MAX_NAME_LENGTH) is None
        assert name_problem("x" * (MAX_NAME_LENGTH + 1)) == (
            f"name longer than {MAX_NAME_LENGTH} characters: open it with redis-cli"
        )
        wide = "流" * 200  # 9 bytes each once encoded
        assert len(name_segment(wide)) == 1800 > MAX_SEGMENT_BYTES
        assert name_problem(wide) == (
            f"name too long for a URL (1800 bytes encoded, at most {MAX_SEGMENT_BYTES}): "
            "open it with redis-cli"
        )
        assert name_problem("a\x00b") == "name contains a NUL character: open it with redis-cli"
        assert name_problem("") == "empty name: open it with redis-cli"


# --- pages --------------------------------------------------------------------------------


@pytest.fixture
def dot_streams(settings: Any, redis_url: str, r: redis.Redis) -> Iterator[tuple[str, str]]:
    """Streams named ``.`` and ``..`` (no prefix can be added), each with groups ``.``
    and ``..`` and one pending entry; deleted afterwards with their companions."""
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (".", "..")
    try:
        for name in (".", ".."):
            make_group(r, name, ".")
            make_pending(r, name, "..", "c", 1)
            r.xreadgroup(".", "c", {name: ">"})  # pending in both groups
        yield ".", ".."
    finally:
        for name in (".", ".."):
            keys = stream_keys(name)
            r.delete(keys.stream, keys.dlq, keys.failures)


def _follow(client: Client, page: str, href: str) -> Any:
    """Check the page links ``href``, then follow it as a browser would from ``page``."""
    html = client.get(page).content.decode()
    assert f'href="{href}"' in html, href
    _lands_on_itself(href, page)
    response = client.get(urljoin(BASE + page, href).removeprefix(BASE))
    assert response.status_code == 200, href
    return response


class DotNameTests:
    def test_streams_and_groups_named_dot_open_their_own_pages(
        self, viewer: Client, dot_streams: tuple[str, str]
    ) -> None:
        overview = reverse("dashboard:overview")
        for stream in dot_streams:
            stream_page = reverse("dashboard:stream-detail", args=[stream])
            response = _follow(viewer, overview, stream_page)
            assert response.context["stream"] == stream
            for group in (".", ".."):
                group_page = reverse("dashboard:group-detail", args=[stream, group])
                response = _follow(viewer, stream_page, group_page)
                assert (response.context["stream"], response.context["group"]) == (stream, group)
                entry_id = response.context["rows"][0].id
                entry_page = reverse("dashboard:entry-detail", args=[stream, entry_id])
                response = _follow(viewer, group_page, entry_page)
                assert response.context["entry_id"] == entry_id
                _follow(viewer, entry_page, group_page)

    def test_dead_letters_of_a_dot_stream_link_to_their_group(
        self, viewer: Client, r: redis.Redis, dot_streams: tuple[str, str]
    ) -> None:
        [entry_id] = make_pending(r, "..", ".", "c", 1, create=False)
        entry_dead_letter(client=r, stream="..", group=".", entry_id=entry_id, reason="x")
        dlq_page = reverse("dashboard:dlq", args=[".."])
        _follow(viewer, reverse("dashboard:overview"), dlq_page)
        response = _follow(viewer, dlq_page, reverse("dashboard:group-detail", args=["..", "."]))
        assert response.context["group"] == "."


class UnlinkableNameTests:
    @pytest.fixture(autouse=True)
    def _redis(self, settings: Any, redis_url: str, prefix: str) -> None:
        settings.ACKBOARD_REDIS_URL = redis_url
        settings.ACKBOARD_STREAMS = (prefix + "*",)

    def test_a_stream_too_long_for_a_url_is_listed_with_the_reason(
        self, viewer: Client, r: redis.Redis, prefix: str
    ) -> None:
        long_name = prefix + "x" * (MAX_NAME_LENGTH + 1 - len(prefix))
        wide_name = prefix + "流" * 200
        for name in (long_name, wide_name):
            make_pending(r, name, "g", "c", 1)
            entry_dead_letter(
                client=r, stream=name, group="g", entry_id=r.xrange(name)[0][0].decode(),
                reason="x",
            )  # fmt: skip
        response = viewer.get(reverse("dashboard:overview"))
        html = response.content.decode()
        assert {row.name for row in response.context["rows"]} == {long_name, wide_name}
        for name in (long_name, wide_name):
            assert f"({name_problem(name)})</span>" in html
            for route in ("dashboard:stream-detail", "dashboard:dlq"):
                href = reverse(route, args=[name])
                assert href not in html
                # Typed by hand, the page says why it cannot open it.
                answer = viewer.get(href)
                assert answer.status_code == 400
                assert "open it with redis-cli" in answer.content.decode()

    def test_groups_and_consumers_too_long_for_a_url_are_listed_with_the_reason(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        group = "g" * (MAX_NAME_LENGTH + 1)
        consumer = "c" * (MAX_NAME_LENGTH + 1)
        [entry_id] = make_pending(r, stream, group, consumer, 1)
        make_pending(r, stream, "short", "c", 1)
        note = f"({name_problem(group)})</span>"
        group_href = reverse("dashboard:group-detail", args=[stream, group])

        stream_html = viewer.get(reverse("dashboard:stream-detail", args=[stream])).content
        assert note in stream_html.decode() and group_href not in stream_html.decode()
        assert reverse("dashboard:group-detail", args=[stream, "short"]) in stream_html.decode()
        entry_html = viewer.get(reverse("dashboard:entry-detail", args=[stream, entry_id]))
        assert note in entry_html.content.decode()
        assert group_href not in entry_html.content.decode()
        assert viewer.get(group_href).status_code == 400

        entry_dead_letter(client=r, stream=stream, group=group, entry_id=entry_id, reason="x")
        dlq_html = viewer.get(reverse("dashboard:dlq", args=[stream])).content.decode()
        assert note in dlq_html and group_href not in dlq_html

    def test_a_consumer_too_long_for_a_url_has_no_filter_link(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        consumer = "c" * (MAX_NAME_LENGTH + 1)
        make_pending(r, stream, "g", consumer, 1)
        make_pending(r, stream, "g", "short", 1, create=False)
        html = viewer.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
        assert 'href="?consumer=short"' in html
        assert "?consumer=ccc" not in html

    def test_failure_rows_link_only_what_a_url_can_carry(self, viewer: Client, stream: str) -> None:
        wide = "流" * 200  # within the column, too long for a URL once encoded
        now = timezone.now() - timedelta(minutes=1)
        rows = [(stream, "g", ".."), (stream, wide, "1-0"), (stream + wide, "g", "1-0")]
        for i, (name, group, entry_id) in enumerate(rows):
            IndexedFailure.objects.create(
                failures_key=f"k{i}", source_id=f"{i}-0", stream=name, group=group,
                entry_id=entry_id, consumer="c", attempt=1, error_type="E", message=f"m{i}",
                traceback="", duration_ms=1.0, failed_at=now,
            )  # fmt: skip
        response = viewer.get(reverse("dashboard:failure-search"))
        assert response.status_code == 200
        links = {
            (r.failure.message, r.entry_url, r.stream_url, r.group_url)
            for r in response.context["rows"]
        }
        stream_url = reverse("dashboard:stream-detail", args=[stream])
        group_url = reverse("dashboard:group-detail", args=[stream, "g"])
        assert links == {
            ("m0", None, stream_url, group_url),
            ("m1", reverse("dashboard:entry-detail", args=[stream, "1-0"]), stream_url, None),
            ("m2", None, None, None),
        }
        assert "/entries/../" not in response.content.decode()
