"""Decoded payloads in the browser: a msgpack stream, a protobuf stream and a stream of
FastStream's binary messages (the session server's ACKBOARD_DECODERS, tests/browser/
conftest.py) show decoded on the entry page and in the stream page's previews, a
decoded value is found by the stream page's search form, and a secret inside each
format never reaches the page. Screenshots: decoded-msgpack, decoded-protobuf,
decoded-faststream."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack
import pytest
import redis
from playwright.sync_api import expect

from tests import decoder_samples
from tests.browser.server import LiveServer, screenshot

pytestmark = pytest.mark.browser

SECRET = "tok_ZQXJW_never_shown"


def _entries(r: redis.Redis, names: str) -> dict[str, tuple[str, str, str]]:
    """Per format: (stream, entry id, a decoded value the page shows)."""
    wire = {
        "msgpack": (
            {"payload": msgpack.packb({"order": "A-1001", "api_token": SECRET, "qty": 3})},
            "A-1001",
        ),
        "protobuf": (
            {"body": decoder_samples.payment("A-1002", token=SECRET, cents=4200, tags=("gift",))},
            "A-1002",
        ),
        "faststream": (
            {
                # FastStream's encoder runs an event loop: not in Playwright's thread.
                "__data__": ThreadPoolExecutor(1)
                .submit(
                    decoder_samples.faststream_message,
                    json.dumps({"order": "A-1003", "password": SECRET}).encode(),
                    headers={"content-type": "application/json"},
                )
                .result()
            },
            "A-1003",
        ),
    }
    out = {}
    for kind, (fields, shown) in wire.items():
        stream = f"{names}wire-{kind}"
        r.delete(stream)
        out[kind] = (stream, r.xadd(stream, fields).decode(), shown)
    return out


def test_msgpack_protobuf_and_faststream_show_decoded_searchable_and_redacted(
    page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
) -> None:
    for kind, (stream, entry_id, shown) in _entries(browser_redis, names).items():
        page.goto(f"{web_server.url}/streams/{stream}/entries/{entry_id}/")
        fields = page.locator(".card").filter(has_text=shown).first
        expect(fields).to_be_visible()
        expect(page.locator("body")).to_contain_text("redacted")
        assert SECRET not in page.content(), kind
        screenshot(page, f"decoded-{kind}")

        page.goto(f"{web_server.url}/streams/{stream}/")
        row = page.locator("#entry-table tr").filter(has_text=entry_id)
        expect(row.locator("td.preview")).to_contain_text(shown)
        find = page.locator("#find-stream")
        find.locator("summary").click()
        field = {"msgpack": "payload", "protobuf": "body", "faststream": "__data__"}[kind]
        find.locator("input[name=field]").fill(field)
        find.locator("input[name=value]").fill(shown)
        find.get_by_role("button", name="Search").click()
        results = page.locator("#find-results-stream")
        expect(results).to_contain_text(entry_id)
        expect(results.locator(".find-answer")).to_have_attribute("data-done", "1")
        assert SECRET not in page.content(), kind
