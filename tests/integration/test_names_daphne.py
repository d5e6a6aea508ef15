"""Names at the longest a link may carry work through daphne.

``dashboard.display.converters.MAX_SEGMENT_BYTES`` bounds an encoded name so that the heaviest
request a page makes still fits daphne's 16 KB limit on the request line plus headers:
an htmx action from a group page filtered by consumer, which sends the stream and group
in the path and again in HX-Current-URL, with a Referer at Chromium's 4 KB cap. This
test sends exactly that to a real daphne process with every name at the limit.
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from http.cookies import SimpleCookie
from urllib.parse import urlencode

import pytest
import redis

from dashboard.display.converters import MAX_SEGMENT_BYTES, name_problem, name_segment
from tests.browser.server import LiveServer, ServerFailed
from tests.factories import make_pending
from tests.servers import started

# About daphne's request limit, not the server: one engine.
pytestmark = [pytest.mark.production, pytest.mark.one_engine]


def at_limit(prefix: str) -> str:
    """A name whose URL segment is exactly MAX_SEGMENT_BYTES (multi-byte, as a worst case)."""
    name = prefix
    while len(name_segment(name + "流")) <= MAX_SEGMENT_BYTES:
        name += "流"
    name += "x" * (MAX_SEGMENT_BYTES - len(name_segment(name)))
    assert len(name_segment(name)) == MAX_SEGMENT_BYTES and name_problem(name) is None
    return name


class Session:
    """A logged-in HTTP client that sends exactly the headers it is given."""

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self.cookies: dict[str, str] = {}

    def request(
        self, method: str, path: str, body: str = "", headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        sent = {"Host": f"127.0.0.1:{self.server.port}", **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if body:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body.encode(), headers=sent)
        response = conn.getresponse()
        for header in response.headers.get_all("Set-Cookie") or []:
            for key, morsel in SimpleCookie(header).items():
                self.cookies[key] = morsel.value
        text = response.read().decode("utf-8", "replace")
        conn.close()
        return response.status, text

    def login(self) -> None:
        _, page = self.request("GET", "/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token is not None
        form = {
            "csrfmiddlewaretoken": token[1],
            "username": self.server.username,
            "password": self.server.password,
        }
        status, _ = self.request("POST", "/login/", urlencode(form))
        assert status == 302 and "sessionid" in self.cookies


@pytest.fixture
def server(redis_url: str, prefix: str) -> Iterator[LiveServer]:
    with started(LiveServer(redis_url=redis_url, streams=prefix + "*"), ServerFailed) as live:
        yield live


class LongestNamesTests:
    def test_pages_and_an_htmx_action_with_every_name_at_the_limit(
        self, server: LiveServer, r: redis.Redis, prefix: str
    ) -> None:
        stream, group, consumer = at_limit(prefix), at_limit("g"), at_limit("c")
        [entry_id] = make_pending(r, stream, group, consumer, 1)
        session = Session(server)
        session.login()
        base = f"http://127.0.0.1:{server.port}"
        stream_page = f"/streams/{name_segment(stream)}/"
        group_page = f"{stream_page}groups/{name_segment(group)}/"
        filtered = group_page + "?" + urlencode({"consumer": consumer})

        status, html = session.request("GET", stream_page, headers={"Referer": base + "/"})
        assert status == 200 and f'href="{group_page}"' in html
        status, html = session.request("GET", filtered, headers={"Referer": base + stream_page})
        assert status == 200 and entry_id in html

        referer = (base + filtered)[:4096]  # Chromium sends at most 4 KB of referrer
        action = f"{group_page}entries/{entry_id}/retry/"
        status, _ = session.request(
            "POST",
            action,
            body=urlencode({"place": "row"}),
            headers={
                "HX-Request": "true",
                "HX-Current-URL": base + filtered,
                "HX-Target": "pending-" + entry_id,
                "Referer": referer,
                "Origin": base,
                "X-CSRFToken": session.cookies["csrftoken"],
                "User-Agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, "
                "like Gecko) Chrome/126.0.0.0 Safari/537.36",
                "Accept": "*/*",
                "Accept-Language": "en-US,en;q=0.9",
            },
        )
        assert status == 200
        [row] = r.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
        assert row["time_since_delivered"] >= 30_000  # retried: made due for redelivery
