"""The Failures page's "by cause" view in the system Chromium: a new cause appears without
a reload (the table refreshes itself), and Acknowledge on a cause's row goes through the
bulk dry run and Confirm, touching only that cause's pending entries."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from tests.browser.server import LiveServer, screenshot, worker_failure
from tests.factories import make_pending

pytestmark = pytest.mark.browser


def test_by_cause_live_and_acknowledge_a_cause(
    page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
) -> None:
    stream = f"{names}causes-{uuid.uuid4().hex[:6]}"
    ids = make_pending(browser_redis, stream, "g", "w1", 6)
    for n, entry_id in enumerate(ids):
        error = (
            ("TimeoutError", f"payment gateway timed out after {1000 + n} ms")
            if n < 4
            else ("KeyError", f"'customer_{n}'")
        )
        worker_failure(
            browser_redis, stream=stream, group="g", entry_id=entry_id, consumer="w1",
            attempt=1, error=error,
        )  # fmt: skip
    # A new stream's failure log is found by the server's ingestor within 30 s; one
    # pass of the one-shot ingestor on the server's database stores them now.
    web_server._manage("ingest_failures", "--once")
    page.goto(f"{web_server.url}/failures/?view=causes&stream={stream}")
    rows = page.locator("#cause-table tbody tr[data-fingerprint]")
    expect(rows).to_have_count(2)
    timeout_row = rows.filter(has_text="TimeoutError")
    expect(timeout_row.locator(".cause-count")).to_have_text("4")
    expect(timeout_row.locator(".cause-pending")).to_have_text("4")

    # A third cause arrives: the table shows it without a reload.
    worker_failure(
        browser_redis, stream=stream, group="g", entry_id=ids[5], consumer="w1", attempt=2,
        error=("ValueError", "card ending 4242 declined"),
    )  # fmt: skip
    web_server._manage("ingest_failures", "--once")
    expect(rows).to_have_count(3, timeout=15_000)
    expect(rows.filter(has_text="KeyError").locator(".cause-pending")).to_have_text("1")

    # Acknowledge every pending entry whose last failure is the timeout.
    page.fill("#cause-reason", "the gateway is back; these orders were charged by hand")
    timeout_row.get_by_role("button", name="Acknowledge…").click()
    result = page.locator("#bulk-result")
    expect(result).to_contain_text("4 entries whose last failure has cause")
    screenshot(page, "failures-by-cause")
    result.get_by_role("button", name="Confirm acknowledge of 4").click()
    expect(result).to_contain_text("4 done")
    pending = browser_redis.xpending_range(stream, "g", min="-", max="+", count=10)
    assert [p["message_id"].decode() for p in pending] == ids[4:]
    # The refreshed table: the timeout has no pending entry left.
    expect(timeout_row.locator(".cause-pending")).to_have_text("0", timeout=15_000)
