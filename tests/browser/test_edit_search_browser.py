"""Edit & replay, payload search and jump to time in the system Chromium.

The editor validates JSON as it is typed and refuses to submit a broken field, adds a
field, replays, and the dead-letter page then says "replayed as <id>, awaiting success";
a payload search stops at its match limit and Continue finds the rest, once each; a UTC
time opens the stream page at that point.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.browser.server import LiveServer, caught_up, row_button, screenshot

pytestmark = pytest.mark.browser


@pytest.fixture
def stream(names: str) -> str:
    return f"{names}edits-{uuid.uuid4().hex[:6]}"


def _dead_letter(r: redis.Redis, stream: str) -> str:
    r.xgroup_create(stream, "g", id="0", mkstream=True)
    payload = json.dumps({"customer": {"id": "c-7"}, "amount": -12.5, "currency": "EUR"})
    entry_id = r.xadd(stream, {"payload": payload, "source": "checkout"}).decode()
    r.xreadgroup("g", "payments-worker-1", {stream: ">"})
    moved = entry_dead_letter(
        client=r, stream=stream, group="g", entry_id=entry_id, reason="amount must be positive"
    )
    assert moved is not None
    return moved.dlq_id


class EditReplayBrowserTests:
    def test_edit_validate_add_field_and_replay(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        dlq_id = _dead_letter(browser_redis, stream)
        page.goto(f"{web_server.url}/streams/{stream}/dlq/")
        row_button(page.locator(f"#dlq-{dlq_id}"), "Edit & replay", role="link").click()
        page.wait_for_url(f"**/dlq/{dlq_id}/edit/")
        payload = page.locator("fieldset[data-mode=json] textarea")
        expect(payload).to_have_value(json.dumps(
            {"customer": {"id": "c-7"}, "amount": -12.5, "currency": "EUR"}, indent=2
        ))  # fmt: skip
        expect(page.locator("fieldset[data-mode=json] .field-status")).to_have_text("JSON ✓")
        payload.fill('{"customer": {"id": "c-7"}, "amount": 12.5,')
        expect(page.locator("fieldset[data-mode=json] .field-status")).to_contain_text(
            "Not valid JSON"
        )
        page.get_by_role("button", name="Replay edited entry").click()
        expect(page.locator("#editor-error")).to_contain_text("Field 1: Not valid JSON")
        assert page.url.endswith(f"/dlq/{dlq_id}/edit/")  # nothing was sent
        payload.fill('{"customer": {"id": "c-7"}, "amount": 12.5, "currency": "EUR"}')
        payload.blur()
        expect(page.locator("#editor-error")).to_be_hidden()
        expect(payload).to_have_value(
            '{\n  "customer": {\n    "id": "c-7"\n  },\n  "amount": 12.5,\n  "currency": "EUR"\n}'
        )
        page.get_by_role("button", name="Add field").click()
        added = page.locator(".editor-rows fieldset").last
        added.locator(".field-name").fill("ackboard.sneaky")
        expect(added.locator(".field-status")).to_contain_text("reserved")
        added.locator(".field-name").fill("note")
        added.locator(".field-value").fill("sign fixed by hand")
        page.locator(".editor-rows fieldset").nth(1).get_by_role(
            "button", name="Remove field"
        ).click()
        page.get_by_label("Reason (for the audit trail)").fill("sign typo in checkout")
        screenshot(page, "edit-replay")
        page.get_by_role("button", name="Replay edited entry").click()
        page.wait_for_url(f"**/streams/{stream}/dlq/")
        expect(page.locator("#messages")).to_contain_text("replayed with edits")
        row = page.locator(f"#dlq-{dlq_id} .edited-replay")
        expect(row).to_contain_text("awaiting success")
        new_id = row.locator("a").inner_text()
        [(_, fields)] = browser_redis.xrange(stream, min=new_id, max=new_id)
        assert json.loads(fields[b"payload"])["amount"] == 12.5
        assert fields[b"note"] == b"sign fixed by hand"
        assert b"source" not in fields
        assert fields[b"ackboard.edited"] == b"1"
        assert browser_redis.xlen(stream_keys(stream).dlq) == 1  # kept until it succeeds


class SearchBrowserTests:
    def test_search_stops_at_the_match_limit_and_continue_finds_the_rest(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        pipe = browser_redis.pipeline(transaction=False)
        for i in range(130):
            kind = "refund" if i % 2 else "charge"
            pipe.xadd(stream, {"payload": json.dumps({"kind": kind, "n": i})})
        ids = [i.decode() for i in pipe.execute()]
        page.goto(f"{web_server.url}/streams/{stream}/")
        page.get_by_text("Find: payload search").click()
        form = page.locator("#find-stream form.find-form")
        form.get_by_label("Field", exact=True).fill("payload")
        form.get_by_label("Match").select_option("json")
        form.get_by_label("JSON path", exact=True).fill("$.kind")
        form.get_by_label("Value", exact=True).fill("refund")
        form.get_by_role("button", name="Search").click()
        results = page.locator("#find-results-stream")
        expect(results.locator(".find-progress")).to_contain_text("match limit (50)")
        expect(results.locator("tr.find-match")).to_have_count(50)
        found = results.locator("tr.find-match td a").all_inner_texts()
        shown = results.locator(".find-progress").inner_text()
        results.get_by_role("link", name="Continue").click()
        expect(results.locator(".find-progress")).not_to_have_text(shown)
        found += results.locator("tr.find-match td a").all_inner_texts()
        page.locator("#find-stream").scroll_into_view_if_needed()
        page.evaluate("window.scrollTo(0, document.getElementById('find-stream').offsetTop - 8)")
        screenshot(page, "payload-search")
        while results.get_by_role("link", name="Continue").count():
            shown = results.locator(".find-progress").inner_text()
            results.get_by_role("link", name="Continue").click()
            expect(results.locator(".find-progress")).not_to_have_text(shown)
            found += results.locator("tr.find-match td a").all_inner_texts()
        expect(results.locator(".find-progress")).to_contain_text("done.")
        assert found == [i for n, i in reversed(list(enumerate(ids))) if n % 2]

    def test_jump_to_time_opens_the_stream_there(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        old = browser_redis.xadd(stream, {"a": "old"}, id="1796160500000-0").decode()
        new = browser_redis.xadd(stream, {"a": "new"}, id="1796160700000-0").decode()
        page.goto(f"{web_server.url}/streams/{stream}/")
        caught_up(page)  # the push after connect may move the Find section under the click
        page.get_by_text("Find: payload search").click()
        page.locator("#find-stream").get_by_label("Jump to time (UTC)").fill("2026-12-01T21:30:00")
        page.locator("#find-stream").get_by_role("button", name="Go").click()
        page.wait_for_url("**?before=1796160600000-0#entry-table")
        table = page.locator("#entry-table")
        expect(table).to_contain_text(old)
        expect(table).not_to_contain_text(new)
        expect(table).to_be_in_viewport()  # it lands on the table, not the page's top
