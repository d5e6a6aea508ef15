"""The health verdict in the system Chromium, JavaScript on, at 1440 px: the overview and
the group page show the same badge for a failing group, with the same reason beside it
(visible, on the badge's line), as the page and after its first live push."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from tests.browser.server import LiveServer, caught_up, screenshot, worker_failure

pytestmark = pytest.mark.browser


@pytest.fixture
def stream(names: str) -> str:
    return f"{names}mail-{uuid.uuid4().hex[:6]}"


def _verdict(page: Any, within: str, expected: tuple[str, str]) -> None:
    """The first verdict inside ``within`` shows ``expected`` (badge, reason), the reason
    visible and beside the badge: to its right, on its line."""
    verdict = page.locator(f"{within} .verdict").first
    # Retried until the page (or its push) shows it: a push replaces the element.
    expect(verdict.locator(".badge")).to_have_text(expected[0])
    expect(verdict.locator(".verdict-reason")).to_have_text(expected[1])
    expect(verdict.locator(".verdict-reason")).to_be_visible()
    # One measurement in the page (a push may replace the verdict between two calls).
    b, r = page.evaluate(
        """within => {
          const v = document.querySelector(within + ' .verdict');
          const box = e => { const r = e.getBoundingClientRect();
                             return {x: r.left, y: r.top, w: r.width, h: r.height}; };
          return [box(v.querySelector('.badge')), box(v.querySelector('.verdict-reason'))];
        }""",
        within,
    )
    assert r["w"] > 0 and r["h"] > 0, r
    assert r["x"] >= b["x"] + b["w"] - 1, (b, r)  # to its right
    assert r["y"] < b["y"] + b["h"] and b["y"] < r["y"] + r["h"], (b, r)  # same line


class HealthVerdictTests:
    def test_overview_and_group_page_agree_with_the_reason_beside(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        r = browser_redis
        r.xgroup_create(stream, "mailer", id="0", mkstream=True)
        entry_id = r.xadd(stream, {"to": "X@example.invalid"}).decode()
        r.xreadgroup("mailer", "mailer-1", {stream: ">"})  # a live consumer holds it
        for attempt in range(1, 101):
            worker_failure(
                r, stream=stream, group="mailer", entry_id=entry_id, consumer="mailer-1",
                attempt=attempt, error=("SMTPError", "550 mailbox unavailable: X@example.invalid"),
            )  # fmt: skip
        web_server._manage("ingest_failures", "--once")  # new streams are found every 30 s
        page.set_viewport_size({"width": 1440, "height": 900})
        expected = ("failing", "100+ failures in the last hour")

        page.goto(f"{web_server.url}/?q={stream}")
        _verdict(page, "#stream-table", expected)
        caught_up(page)
        _verdict(page, "#stream-table", expected)  # the push says the same
        expect(page.locator("#stream-table .verdict")).to_have_count(1)
        screenshot(page, "health-overview-1440")

        page.goto(f"{web_server.url}/streams/{stream}/groups/mailer/")
        _verdict(page, "#group-health", expected)
        caught_up(page)
        _verdict(page, "#group-health", expected)
        screenshot(page, "health-group-1440")
