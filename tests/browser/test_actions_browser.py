"""Operator actions in the system Chromium: what only a browser shows.

htmx does not swap 4xx answers by default, live updates re-render the rows that hold the
action dialogs, and the bulk bar reads the table's current snapshot: each of these is
checked here against a real daphne server and real Redis.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.browser.server import LiveServer, row_button
from tests.factories import make_pending

pytestmark = pytest.mark.browser


def _group_url(server: LiveServer, stream: str, group: str) -> str:
    return f"{server.url}/streams/{stream}/groups/{group}/"


def _stream(names: str) -> str:
    return f"{names}act-{uuid.uuid4().hex[:6]}"


class ActionDialogTests:
    def test_claim_refused_after_a_worker_took_the_entry_shows_why(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        stream = _stream(names)
        [entry_id] = make_pending(browser_redis, stream, "g", "w1", 1)
        page.goto(_group_url(web_server, stream, "g"))
        row = page.locator(f"#pending-{entry_id}")
        row_button(row, "Claim").click()
        dialog = page.locator("dialog[open]")  # one shared dialog per action
        expect(dialog).to_be_visible()
        # A live push while it is open (a new entry changes the group's figures) leaves
        # the dialog open.
        pushes = page.evaluate("() => +(document.documentElement.dataset.livePushes || 0)")
        browser_redis.xadd(stream, {"payload": "{}"})
        page.wait_for_function(
            "n => +(document.documentElement.dataset.livePushes || 0) > n", arg=pushes
        )
        expect(dialog).to_be_visible()
        browser_redis.xclaim(stream, "g", "w2", 0, [entry_id])  # a worker takes it meanwhile
        dialog.get_by_role("button", name="Claim", exact=True).click()
        expect(page.locator("#messages")).to_contain_text("changed since you looked")
        expect(page.locator("dialog[open]")).to_have_count(0)
        pending = browser_redis.xpending_range(stream, "g", min="-", max="+", count=1)
        assert pending[0]["consumer"] == b"w2"

    def test_acknowledge_with_a_reason_removes_the_row(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        stream = _stream(names)
        [entry_id, other] = make_pending(browser_redis, stream, "g", "w1", 2)
        page.goto(_group_url(web_server, stream, "g"))
        row = page.locator(f"#pending-{entry_id}")
        row_button(row, "Acknowledge").click()
        dialog = page.locator("dialog[open]")  # one shared dialog per action
        dialog.get_by_label("Reason (required)").fill("duplicate <b>order</b>")
        dialog.get_by_role("button", name="Acknowledge", exact=True).click()
        expect(page.locator(f"#pending-{entry_id}")).to_have_count(0)
        expect(page.locator("#messages")).to_contain_text("acknowledged")
        expect(page.locator(f"#pending-{other}")).to_be_visible()
        assert browser_redis.xpending(stream, "g")["pending"] == 1
        # Live updates resume once the dialog's row is gone.
        expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")


class BulkBarTests:
    def test_bulk_dead_letter_of_selected_rows_with_dry_run(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        stream = _stream(names)
        ids = make_pending(browser_redis, stream, "g", "w1", 4)
        page.goto(_group_url(web_server, stream, "g"))
        for entry_id in ids[:3]:
            page.locator(f"#pending-{entry_id} input[form=bulk-form]").check()
        page.locator("#bulk-form").get_by_role("button", name="Dead-letter…").click()
        result = page.locator("#bulk-result")
        expect(result).to_contain_text("3 entries of the 3 selected")
        assert browser_redis.xlen(stream_keys(stream).dlq) == 0  # the dry run changed nothing
        result.get_by_role("button", name="Confirm dead-letter of 3").click()
        expect(result).to_contain_text("3 done")
        for entry_id in ids[:3]:
            expect(page.locator(f"#pending-{entry_id}")).to_have_count(0)
        assert browser_redis.xlen(stream_keys(stream).dlq) == 3
        assert browser_redis.xpending(stream, "g")["pending"] == 1


class PurgeTests:
    def test_purge_needs_the_typed_stream_name(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        stream = _stream(names)
        ids = make_pending(browser_redis, stream, "g", "w1", 2)
        for entry_id in ids:
            entry_dead_letter(
                client=browser_redis, stream=stream, group="g", entry_id=entry_id, reason="x"
            )
        page.goto(f"{web_server.url}/streams/{stream}/dlq/")
        page.get_by_role("button", name="Purge", exact=True).click()
        dialog = page.locator("dialog[open]")
        dialog.get_by_label("Type the stream name to confirm").fill("not-it")
        dialog.get_by_role("button", name="Purge", exact=True).click()
        expect(page.locator("#messages")).to_contain_text("Type the stream's name")
        assert browser_redis.xlen(stream_keys(stream).dlq) == 2
        page.get_by_role("button", name="Purge", exact=True).click()
        dialog = page.locator("dialog[open]")
        dialog.get_by_label("Type the stream name to confirm").fill(stream)
        dialog.get_by_role("button", name="Purge", exact=True).click()
        expect(page.locator("#messages")).to_contain_text("Purged 2 dead-letter entries")
        assert browser_redis.exists(stream_keys(stream).dlq) == 0
