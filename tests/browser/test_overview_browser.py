"""The paged overview in a browser: the pager and the filter swap the view and its socket,
and a deeper page stays live (its own rows are pushed, not the first page's).

Its own production web process, with two streams a page, over its own streams."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from tests.browser.server import (
    LiveServer,
    caught_up,
    log_problems,
    login,
    serving,
    socket_connects,
)
from tests.factories import add_entries

pytestmark = [pytest.mark.browser, pytest.mark.production]


@pytest.fixture
def paged_server(redis_url: str, browser_redis: redis.Redis) -> Iterator[tuple[LiveServer, str]]:
    prefix = f"ovb{uuid.uuid4().hex[:6]}:"
    for i in range(5):
        add_entries(browser_redis, f"{prefix}s{i}", 1)
    server = LiveServer(
        redis_url=redis_url,
        streams=prefix + "*",
        extra_env={"ACKBOARD_OVERVIEW_PAGE_SIZE": "2", "ACKBOARD_INDEX_REFRESH_S": "0.5"},
    )
    try:
        with serving(server):
            yield server, prefix
    finally:
        for key in browser_redis.scan_iter(match=prefix + "*", count=1000):
            browser_redis.delete(key)


def _names(page: Any) -> list[str]:
    return [n.strip() for n in page.locator("#stream-table td.name a").all_inner_texts()]


class PagedOverviewTests:
    def test_next_page_is_live_and_the_filter_narrows(
        self, chromium: Any, paged_server: tuple[LiveServer, str], browser_redis: redis.Redis
    ) -> None:
        server, prefix = paged_server
        context = chromium.new_context(viewport={"width": 1280, "height": 860})
        context.set_default_timeout(15_000)
        mark = server.log_mark()
        try:
            page = context.new_page()
            login(page, server)
            expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")
            caught_up(page)  # the pager is in the pushed table
            assert _names(page) == [prefix + "s0", prefix + "s1"]
            page.evaluate("() => { window.__samePage = true; }")

            page.get_by_role("link", name="Next").click()
            page.wait_for_url("**/?page=2")
            expect(page.locator("#overview-position")).to_contain_text("Streams 3–4 of 5")
            assert _names(page) == [prefix + "s2", prefix + "s3"]
            expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")
            # A change on page 2 is pushed to page 2: its own socket, not the first page's.
            add_entries(browser_redis, prefix + "s3", 2)
            row = page.locator("#stream-table tr", has_text=prefix + "s3")
            expect(row.locator("td.num").first).to_have_text("3")
            assert _names(page) == [prefix + "s2", prefix + "s3"]

            page.fill("input[name=q]", "S4")
            page.get_by_role("button", name="Show").click()
            expect(page.locator("#overview-position")).to_contain_text("Streams 1–1 of 1")
            assert _names(page) == [prefix + "s4"]
            assert page.evaluate("() => window.__samePage === true"), "no full reload"
        finally:
            context.close()
        log = server.log_since(mark)
        assert socket_connects(log, "/ws/overview/-/") == 1
        assert socket_connects(log, "/ws/overview/page=2/") == 1
        assert log_problems(log) == []
