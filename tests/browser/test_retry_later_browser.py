"""Retry later in the browser, JavaScript on: press it on a pending row far down the
group page, give the time in its dialog, confirm, and see "due at" in that row while
Redis holds the entry parked with its due time."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core.keys import stream_keys
from queue_core.services import LATER_CONSUMER
from tests.browser.server import LiveServer, caught_up
from tests.browser.test_every_button import (
    _far,
    _pending,
    _pending_row,
    _shop,
    confirm,
    press_row_action,
)

pytestmark = pytest.mark.browser


def test_retry_later_on_a_row_shows_due_at_and_parks_the_entry(
    page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
) -> None:
    shop = _shop(browser_redis, names)
    page.goto(f"{web_server.url}/streams/{shop.stream}/groups/billing/")
    caught_up(page)
    entry_id = _far(shop, 4)
    row = _pending_row(page, entry_id)
    press_row_action(row, "Retry later")
    confirm(page, "Retry later", {"or in": "90m"})
    badge = _pending_row(page, entry_id).locator(".due-at")
    expect(badge).to_have_text(re.compile(r"^due at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
    due = browser_redis.zscore(stream_keys(shop.stream).later("billing"), entry_id)
    assert due is not None and abs(due - (time.time() * 1000 + 90 * 60_000)) < 60_000
    expect(badge).to_have_attribute("data-due-ms", str(int(due)))
    parked = _pending(browser_redis, shop.stream, entry_id)
    assert parked is not None and parked["consumer"] == LATER_CONSUMER.encode()
    assert parked["times_delivered"] == 1
    # Only that row is parked.
    expect(page.locator("#pending-table .due-at")).to_have_count(1)


def test_a_bad_time_is_refused_in_the_dialog_and_nothing_is_parked(
    page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
) -> None:
    shop = _shop(browser_redis, names)
    page.goto(f"{web_server.url}/streams/{shop.stream}/groups/billing/")
    caught_up(page)
    entry_id = _far(shop, 4)
    press_row_action(_pending_row(page, entry_id), "Retry later")
    confirm(page, "Retry later", {"or in": "<b>soon</b>"})
    expect(
        page.locator("#messages .flash", has_text="'in' must be a number and a unit")
    ).to_be_visible()
    assert browser_redis.zscore(stream_keys(shop.stream).later("billing"), entry_id) is None
    expect(page.locator("#pending-table b")).to_have_count(0)
