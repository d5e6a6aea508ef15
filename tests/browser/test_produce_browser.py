"""Produce and Duplicate in the system Chromium, JavaScript on: the Produce page's editor
(a JSON field checked as typed, a field added), its confirm dialog naming the fields,
then the new entry's page; the entry page's Duplicate and its confirm dialog, then the
copy's page. Each checks what Redis holds (XRANGE) and what the user sees."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from tests.browser.server import LiveServer

pytestmark = pytest.mark.browser


@pytest.fixture
def stream(names: str) -> str:
    return f"{names}produce-{uuid.uuid4().hex[:6]}"


def _newest(r: redis.Redis, stream: str) -> tuple[str, dict[bytes, bytes]]:
    [(entry_id, fields)] = r.xrevrange(stream, count=1)
    return entry_id.decode(), dict(fields)


class ProduceBrowserTests:
    def test_edit_confirm_and_see_the_new_entry(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        browser_redis.xgroup_create(stream, "g", id="0", mkstream=True)
        browser_redis.xadd(stream, {"seed": "1"})
        page.goto(f"{web_server.url}/streams/{stream}/")
        page.locator("#produce-link").click()
        page.wait_for_url(f"**/streams/{stream}/produce/")
        first = page.locator(".editor-rows fieldset").nth(0)
        first.get_by_label("Name").fill("payload")
        first.get_by_label("Value").fill('{"order": 7}')  # a JSON object: a JSON field now
        expect(first.locator(".field-status")).to_have_text("JSON ✓")
        first.get_by_label("Value").fill('{"order": 7, "items": [1,')
        expect(first.locator(".field-status")).to_contain_text("Not valid JSON")
        page.get_by_role("button", name="Produce…").click()
        expect(page.locator("#editor-error")).to_contain_text("Field 1")
        expect(page.locator("dialog[open]")).to_have_count(0)
        first.get_by_label("Value").fill('{"order": 7, "items": [1, 2]}')
        expect(first.locator(".field-status")).to_have_text("JSON ✓")
        page.get_by_role("button", name="Add field").click()
        second = page.locator(".editor-rows fieldset").nth(1)
        second.get_by_label("Name").fill("type")
        second.get_by_label("Value").fill("<b>order.created</b>")
        page.get_by_role("button", name="Produce…").click()
        dialog = page.locator("dialog[open]")
        expect(dialog.locator("#produce-summary")).to_have_text("2 fields: payload, type.")
        assert browser_redis.xlen(stream) == 1  # nothing before the confirm
        dialog.get_by_role("button", name="Produce entry").click()
        page.wait_for_url(f"**/streams/{stream}/entries/*/")
        new_id, fields = _newest(browser_redis, stream)
        assert fields == {
            b"payload": b'{"order":7,"items":[1,2]}',
            b"type": b"<b>order.created</b>",
        }
        assert page.url.endswith(f"/streams/{stream}/entries/{new_id}/")
        expect(page.locator("h1 .mono")).to_have_text(new_id)
        expect(page.locator("#messages .flash")).to_contain_text(f"Entry {new_id} added")
        expect(page.locator("b", has_text="order.created")).to_have_count(0)  # escaped

    def test_a_refusal_is_shown_and_the_edits_kept(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        browser_redis.xadd(stream, {"seed": "1"})
        page.goto(f"{web_server.url}/streams/{stream}/produce/")
        first = page.locator(".editor-rows fieldset").nth(0)
        first.get_by_label("Name").fill("note")
        first.get_by_label("Value").fill("kept")
        browser_redis.delete(stream)  # gone since the page loaded: refused, not created
        page.get_by_role("button", name="Produce…").click()
        page.locator("dialog[open]").get_by_role("button", name="Produce entry").click()
        expect(page.locator("#messages .flash")).to_contain_text("no stream")
        expect(page.locator("dialog[open]")).to_have_count(0)
        expect(first.get_by_label("Value")).to_have_value("kept")
        assert not browser_redis.exists(stream)


class DuplicateBrowserTests:
    def test_duplicate_from_the_entry_page(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        browser_redis.xgroup_create(stream, "g", id="0", mkstream=True)
        source = browser_redis.xadd(stream, {"type": "order", "blob": b"\xff"}).decode()
        page.goto(f"{web_server.url}/streams/{stream}/entries/{source}/")
        page.locator("#entry-actions").get_by_role("button", name="Duplicate").click()
        dialog = page.locator("dialog[open]")
        expect(dialog).to_contain_text(f"Duplicate entry {source}")
        dialog.get_by_role("button", name="Duplicate").click()
        page.wait_for_url(lambda url: "/entries/" in url and source not in url)
        new_id, fields = _newest(browser_redis, stream)
        assert new_id != source and fields == {b"type": b"order", b"blob": b"\xff"}
        assert browser_redis.xlen(stream) == 2
        assert page.url.endswith(f"/streams/{stream}/entries/{new_id}/")
        expect(page.locator("#messages .flash")).to_contain_text(
            f"Entry {source} duplicated as {new_id}"
        )
