"""Group administration in the system Chromium: each new button on its page.

The stream page's Create group (its dialog) and Trim (dry run, then confirm); the group
page's Reset position (dry run, then confirm, then the Undo it offers) and Delete group
(the typed name; the answer lands on the stream page). Real daphne, real Redis.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core import admin
from tests.browser.server import LiveServer
from tests.factories import add_entries

pytestmark = pytest.mark.browser


def _stream(names: str) -> str:
    return f"{names}adm-{uuid.uuid4().hex[:6]}"


def _groups(r: redis.Redis, stream: str) -> dict[str, dict[str, Any]]:
    return {g["name"].decode(): g for g in r.xinfo_groups(stream)}


class StreamPageTests:
    def test_create_group_then_trim_with_a_dry_run(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        stream = _stream(names)
        ids = add_entries(browser_redis, stream, 6)
        page.goto(f"{web_server.url}/streams/{stream}/")
        # Live: a group created elsewhere (the CLI, another operator) shows up unreloaded.
        admin.group_create(
            client=browser_redis,
            stream=stream,
            group="elsewhere",
            position=admin.position_parse("end"),
        )
        expect(page.locator("#group-table")).to_contain_text("elsewhere")
        page.get_by_role("button", name="Create group").click()
        dialog = page.locator("dialog[open]")
        dialog.get_by_label("Group name").fill("reporting")
        dialog.get_by_label("the end (only entries added from now on)").check()
        dialog.get_by_role("button", name="Create group").click()
        expect(page.locator("#group-table")).to_contain_text("reporting")
        expect(page.locator("#messages")).to_contain_text("Group reporting created")
        assert _groups(browser_redis, stream)["reporting"]["last-delivered-id"] == ids[5].encode()

        form = page.locator("#trim-form")
        form.get_by_label("Delete entries older than").fill(ids[3])
        form.get_by_role("button", name="Preview trim…").click()
        expect(page.locator("#trim-count")).to_contain_text("3 entries older than")
        assert browser_redis.xlen(stream) == 6  # the dry run changed nothing
        page.locator("#trim-result").get_by_role("button", name="Confirm trim").click()
        expect(page.locator("#messages")).to_contain_text("Trimmed 3 entries")
        assert browser_redis.xlen(stream) == 3


class GroupPageTests:
    def test_reset_position_with_a_dry_run_then_undo_then_delete_the_group(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        stream = _stream(names)
        ids = add_entries(browser_redis, stream, 5)
        browser_redis.xgroup_create(stream, "g", id="$")
        page.goto(f"{web_server.url}/streams/{stream}/groups/g/")
        form = page.locator("#reset-form")
        form.get_by_label("the start (every entry in the stream)").check()
        form.get_by_role("button", name="Preview reset…").click()
        expect(page.locator("#reset-effect")).to_have_text("5 entries would be delivered again.")
        assert _groups(browser_redis, stream)["g"]["last-delivered-id"] == ids[4].encode()
        page.locator("#reset-result").get_by_role("button", name="Confirm reset").click()
        expect(page.locator("#messages")).to_contain_text(f"reset from {ids[4]}")
        assert _groups(browser_redis, stream)["g"]["last-delivered-id"] == b"0-0"

        undo = page.locator("#reset-undo")
        expect(undo).to_contain_text(ids[4])
        undo.get_by_role("button", name="Undo…").click()
        expect(page.locator("#reset-effect")).to_have_text(
            "5 entries would be skipped (never delivered)."
        )
        page.locator("#reset-result").get_by_role("button", name="Confirm reset").click()
        expect(page.locator("#messages")).to_contain_text("reset from 0-0")
        assert _groups(browser_redis, stream)["g"]["last-delivered-id"] == ids[4].encode()

        page.locator("#delete-group").get_by_role("button", name="Delete group").click()
        dialog = page.locator("dialog[open]")
        dialog.get_by_label("Type the group name to confirm").fill("g")
        dialog.get_by_role("button", name="Delete group").click()
        page.wait_for_url(f"{web_server.url}/streams/{stream}/")
        expect(page.locator("#messages")).to_contain_text("Group g deleted")
        assert browser_redis.xinfo_groups(stream) == []
