"""Times since an instant, written by the browser (dashboard/static/dashboard/ackboard.js,
``[data-since]``) against the server's clock, in the system Chromium.

The server's HTML carries only the instant a pending entry was delivered (and an entry was
added); the page shows "2 h" from it and keeps it current. The browser's own clock is set
three days ahead here: the times must still be the server's, and a Claim, which posts the
idle time the operator saw as its guard, must still pass (a guard taken from the browser's
clock would be three days too long and be refused as "changed since you looked").
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from tests.browser.server import LiveServer, row_button
from tests.factories import make_pending

pytestmark = pytest.mark.browser

TWO_HOURS_MS = 2 * 3_600_000


@pytest.fixture
def stream(names: str) -> str:
    return f"{names}times-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def skewed_page(chromium: Any, web_server: LiveServer, login_state: Any) -> Iterator[Any]:
    """A logged-in page whose clock runs three days ahead of the server's."""
    context = chromium.new_context(
        viewport={"width": 1280, "height": 860}, storage_state=login_state
    )
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.clock.set_system_time(dt.datetime.now(dt.UTC) + dt.timedelta(days=3))
    try:
        yield page
    finally:
        context.close()


class ClientTimesTests:
    def test_idle_times_are_the_servers_and_a_claim_passes_its_guard(
        self, skewed_page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        page = skewed_page
        [entry_id] = make_pending(browser_redis, stream, "g", "w1", 1)
        browser_redis.xclaim(stream, "g", "w1", 0, [entry_id], idle=TWO_HOURS_MS, justid=True)
        page.goto(f"{web_server.url}/streams/{stream}/groups/g/")
        row = page.locator(f"#pending-{entry_id}")
        idle = row.locator("[data-since]")
        # "2 h" (the minutes are 0): not "3 d 2 h" from the browser's clock, and not the
        # server's no-JavaScript text (the UTC instant).
        expect(idle).to_have_text("2 h")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.000 UTC · [\d,]+ ms ago",
                            idle.get_attribute("title") or "")  # fmt: skip
        added = page.locator("#group-summary [data-since]")
        expect(added).to_have_text(re.compile(r"^added \d+ (ms|s) ago$"))

        # The times stay current: an entry delivered now reads seconds, then more.
        browser_redis.xclaim(stream, "g", "w1", 0, [entry_id], idle=0, justid=True)
        page.reload()
        expect(idle).to_have_text(re.compile(r"^\d+ (ms|s)$"))
        first = idle.inner_text()
        expect(idle).not_to_have_text(first, timeout=4_000)

        # Claim posts the idle time seen by the server's clock: never more than the truth.
        browser_redis.xclaim(stream, "g", "w1", 0, [entry_id], idle=TWO_HOURS_MS, justid=True)
        page.reload()
        expect(idle).to_have_text("2 h")
        row_button(row, "Claim").click()
        dialog = page.locator("dialog[open]")
        seen = int(dialog.locator("input[name=seen_idle_ms]").input_value())
        assert TWO_HOURS_MS - 5_000 <= seen <= TWO_HOURS_MS + 60_000
        dialog.get_by_label("To consumer").fill("debugger")
        dialog.get_by_role("button", name="Claim", exact=True).click()
        expect(page.locator(f"#pending-{entry_id} td.consumer")).to_have_text("debugger")
        [claimed] = browser_redis.xpending_range(stream, "g", entry_id, entry_id, 1)
        assert claimed["consumer"] == b"debugger"
