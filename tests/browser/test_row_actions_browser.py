"""The group page's shared row actions in the system Chromium (templates/dashboard/group.html,
dashboard/static/dashboard/row_actions.js).

One confirm dialog per action on the page, whatever the number of rows; opened from a row,
it names that row's entry and posts what that row showed; the action then swaps or removes
that row. At 1280 px the last action button of a row's menu, in a row with long ids,
consumer names and failures, is fully on screen. Without JavaScript (the menu is a native
disclosure), Retry still posts (post/redirect/get) and the other buttons lead to the
entry's page.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core.keys import stream_keys
from tests.browser.server import LiveServer, row_button, screenshot, worker_failure
from tests.waiting import wait_until

pytestmark = pytest.mark.browser

#: A consumer name as a fleet names them (host-pid-random), near the table's 40-char cut.
LONG_CONSUMER = "payments-worker-eu-west-1a-7f9c2d-31337"


def _group_url(server: LiveServer, stream: str, group: str) -> str:
    return f"{server.url}/streams/{stream}/groups/{group}/"


def _long_pending(r: redis.Redis, stream: str, group: str, n: int) -> list[str]:
    """``n`` entries with long ids (a large sequence part), pending on LONG_CONSUMER, each
    with a long payload and a recorded failure."""
    base = int(time.time() * 1000)
    ids = []
    for i in range(n):
        fields = {
            "payload": json.dumps({"order_id": 10_000 + i, "note": "x" * 300}),
            "source": "checkout-service-with-a-long-name",
        }
        ids.append(r.xadd(stream, fields, id=f"{base}-{1_234_567 + i}").decode())
    r.xgroup_create(stream, group, id="0")
    r.xreadgroup(group, LONG_CONSUMER, {stream: ">"})
    for entry_id in ids:
        worker_failure(
            r, stream=stream, group=group, entry_id=entry_id, consumer=LONG_CONSUMER, attempt=1,
            error=("ConnectionResetError", "[Errno 104] Connection reset by peer " + "y" * 200),
        )  # fmt: skip
    return ids


@pytest.fixture
def stream(names: str) -> str:
    return f"{names}rows-{uuid.uuid4().hex[:6]}"


class SharedDialogTests:
    def test_one_dialog_per_action_filled_from_the_row_it_was_opened_for(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        ids = _long_pending(browser_redis, stream, "g", 4)
        page.goto(_group_url(web_server, stream, "g"))
        expect(page.locator("tr[id^=pending-]")).to_have_count(4)
        # One per action, not one per row (the group's own actions have theirs elsewhere).
        assert page.locator("#row-action-forms dialog").count() == 4
        for action in ("claim", "dead-letter", "acknowledge", "retry-later"):
            expect(page.locator(f"dialog#row-dialog-{action}")).to_have_count(1)

        # Claim from the third row: the dialog names it and posts what the row showed.
        target = ids[2]
        row_button(page.locator(f"#pending-{target}"), "Claim").click()
        dialog = page.locator("dialog[open]")
        expect(dialog).to_have_attribute("aria-label", f"Claim entry {target}")
        expect(dialog.locator("code[data-fill=id]")).to_have_text(target)
        expect(dialog.locator("code[data-fill=consumer]")).to_have_text(LONG_CONSUMER)
        expect(dialog.locator("[data-fill=deliveries]")).to_have_text("1 delivery")
        expect(dialog.locator("input[name=seen_consumer]")).to_have_value(LONG_CONSUMER)
        expect(dialog.locator("input[name=seen_deliveries]")).to_have_value("1")
        expect(dialog.locator(".live-hold")).to_be_checked()
        dialog.get_by_label("To consumer").fill("debugger")
        dialog.get_by_role("button", name="Claim", exact=True).click()
        expect(page.locator("dialog[open]")).to_have_count(0)
        # The claimed row is swapped in place (found by its id), the others are untouched.
        expect(page.locator(f"#pending-{target} td.consumer")).to_have_text("debugger")
        [claimed] = browser_redis.xpending_range(stream, "g", target, target, 1)
        assert claimed["consumer"] == b"debugger"
        expect(page.locator(f"#pending-{ids[1]} td.consumer")).to_have_text(LONG_CONSUMER)

        # The same dialog element serves another row and another action.
        other = ids[0]
        row_button(page.locator(f"#pending-{other}"), "Dead-letter").click()
        dialog = page.locator("dialog[open]")
        expect(dialog).to_have_attribute("aria-label", f"Dead-letter entry {other}")
        dialog.locator("input[name=reason]").fill("poison <b>pill</b>")
        dialog.get_by_role("button", name="Dead-letter").click()
        expect(page.locator(f"#pending-{other}")).to_have_count(0)
        expect(page.locator("#messages")).to_contain_text("dead-letter")
        [(_, fields)] = browser_redis.xrange(stream_keys(stream).dlq)
        assert fields[b"ackboard.reason"] == b"poison <b>pill</b>"
        assert browser_redis.xpending(stream, "g")["pending"] == 3
        # Live updates resume once the dialog is closed.
        expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")

    def test_the_last_action_button_of_a_row_fits_at_1280_px(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        page.set_viewport_size({"width": 1280, "height": 800})
        ids = _long_pending(browser_redis, stream, "g", 3)
        # Idle for hours: the widest idle time, and Retry says "already due".
        browser_redis.xclaim(stream, "g", LONG_CONSUMER, 0, ids, idle=20 * 3_600_000, justid=True)
        row = page.locator(f"#pending-{ids[0]}")
        # With its failure shown, the widest a row gets: index it now (the server's own
        # ingestor finds new streams only every 30 s).
        web_server._manage("ingest_failures", "--once")

        def shown() -> bool:
            page.goto(_group_url(web_server, stream, "g"))
            return "Connection reset" in row.locator("td.failure").inner_text()

        wait_until(shown, timeout=10, interval=0.5, what="the failure index to show the failure")
        expect(row.locator("td.actions-cell")).to_contain_text("already due")
        # The actions are one menu a row: opened, its last button is Retry later (the
        # declared buttons follow the hand-written ones).
        last = row_button(row, "Retry later")
        expect(row.locator("td.actions-cell button").last).to_have_text("Retry later")
        screenshot(page, "group-actions-1280")
        # One measurement in the page (a live push may replace the row between two calls).
        left, right = last.evaluate(
            "e => [e.getBoundingClientRect().left, e.getBoundingClientRect().right]"
        )
        assert left >= 0 and right <= 1280, (left, right)
        # Not cut off by the table's own scroll box either, nor by the page.
        wrap = page.locator("#pending-table .table-wrap")
        scroll, client = wrap.evaluate("e => [e.scrollWidth, e.clientWidth]")
        assert scroll <= client, (scroll, client)
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280


class WithoutJavaScriptTests:
    def test_retry_posts_and_redirects_and_claim_leads_to_the_entry_page(
        self, no_js_page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        ids = _long_pending(browser_redis, stream, "g", 2)
        url = _group_url(web_server, stream, "g")
        no_js_page.goto(url)
        row_button(no_js_page.locator(f"#pending-{ids[0]}"), "Retry").click()
        no_js_page.wait_for_load_state()
        assert no_js_page.url == url  # post/redirect/get, back to the page
        expect(no_js_page.locator("#messages")).to_contain_text("will be redelivered")
        [retried] = browser_redis.xpending_range(stream, "g", ids[0], ids[0], 1)
        assert retried["time_since_delivered"] >= 30_000  # made due (ACKBOARD_RETRY_IDLE_MS)

        row_button(no_js_page.locator(f"#pending-{ids[1]}"), "Claim").click()
        # A GET form: the entry's page, with an empty query string.
        no_js_page.wait_for_url(re.compile(re.escape(f"/streams/{stream}/entries/{ids[1]}/")))
        expect(no_js_page.locator("h1")).to_contain_text(ids[1])
