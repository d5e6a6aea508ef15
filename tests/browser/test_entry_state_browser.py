"""The entry page's "State in each group" table in the system Chromium, JavaScript on, at
1440 and 1024 px: it fits its box (no horizontal scroll) with a long group name, a long
consumer name and a pending row's action buttons, and the Retry explanation under the
button is fully visible inside the table. A dead-lettered group links to its dead letter.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core import services
from tests.browser.server import LiveServer, caught_up, screenshot

pytestmark = pytest.mark.browser

#: A consumer name as a fleet names them (host-pid-random), near the table's 40-char cut.
LONG_CONSUMER = "payments-worker-eu-west-1a-7f9c2d-31337"
LONG_GROUP = "invoice-renderer-and-archiver-for-eu-customers"


@pytest.fixture
def stream(names: str) -> str:
    return f"{names}entry-{uuid.uuid4().hex[:6]}"


def _entry(r: redis.Redis, stream: str) -> str:
    """One entry with a long id, pending in LONG_GROUP on LONG_CONSUMER (idle for hours,
    so Retry's explanation is its longest: "already due"), acknowledged in "shipping"
    and dead-lettered in "audit"."""
    entry_id = r.xadd(stream, {"payload": "{}"}, id=f"{int(time.time() * 1000)}-1234567").decode()
    for group in (LONG_GROUP, "shipping", "audit"):
        r.xgroup_create(stream, group, id="0")
        r.xreadgroup(group, LONG_CONSUMER if group == LONG_GROUP else "w", {stream: ">"})
    r.xclaim(stream, LONG_GROUP, LONG_CONSUMER, 0, [entry_id], idle=20 * 3_600_000, justid=True)
    r.xack(stream, "shipping", entry_id)
    services.entry_dead_letter(
        client=r, stream=stream, group="audit", entry_id=entry_id, reason="bad"
    )
    return entry_id


class EntryStateTableTests:
    @pytest.mark.parametrize("width", [1440, 1024])
    def test_the_table_fits_its_box_and_the_retry_explanation_shows(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str, width: int
    ) -> None:
        entry_id = _entry(browser_redis, stream)
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{web_server.url}/streams/{stream}/entries/{entry_id}/")
        caught_up(page)  # the pushed table is the one measured
        explain = page.locator("#entry-state p.explain").first
        expect(explain).to_be_visible()
        expect(explain).not_to_be_empty()
        screenshot(page, f"entry-state-{width}")
        # One measurement in the page (a push may replace the table between two calls).
        wrap_box, table_width, scroll, client, text_box, doc = page.evaluate(
            """() => {
              const wrap = document.querySelector('#entry-state');
              const p = wrap.querySelector('p.explain');
              const box = e => { const r = e.getBoundingClientRect();
                                 return [r.left, r.right, r.top, r.bottom]; };
              return [box(wrap), wrap.querySelector('table').scrollWidth, wrap.scrollWidth,
                      wrap.clientWidth, box(p), document.documentElement.scrollWidth];
            }"""
        )
        assert scroll <= client, (scroll, client)  # the box does not scroll sideways
        assert table_width <= client, (table_width, client)
        assert doc <= width, doc
        left, right, top, bottom = text_box
        assert wrap_box[0] <= left and right <= wrap_box[1], (text_box, wrap_box)
        assert right <= width and bottom > top
        # Playwright's own box of the explanation: inside the viewport, not cut.
        box = explain.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width

    def test_dead_lettered_group_links_to_its_dead_letter(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        entry_id = _entry(browser_redis, stream)
        page.goto(f"{web_server.url}/streams/{stream}/entries/{entry_id}/")
        row = page.locator("#entry-state tr", has_text="audit")
        expect(row.locator(".badge")).to_have_text("dead-lettered")
        row.locator("a.mono").click()
        page.wait_for_url(f"**/streams/{stream}/dlq/**")
        (dead,) = browser_redis.xrange(f"{{{stream}}}:dlq")
        dlq_id: str = dead[0].decode()
        expect(page.locator(f"#dlq-{dlq_id}")).to_be_visible()
