"""Fleet control in the system Chromium: what only a browser and real
processes show.

A real ``manage.py queue_worker`` appears in the group page's Workers section without a
reload (its heartbeats, pushed live); Pause makes the banner say the worker confirmed
it, and Resume lifts it; a consumer row's Retire opens the shared dialog for that row.
Retire idle consumers is pressed in test_every_button.py (its dry run, then the run) and
its rules are checked over HTTP in tests/dashboard/test_fleet.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from tests.browser.server import LiveServer
from tests.factories import make_group, make_pending

pytestmark = pytest.mark.browser


def _group_url(server: LiveServer, stream: str, group: str = "g") -> str:
    return f"{server.url}/streams/{stream}/groups/{group}/"


def _stream(names: str) -> str:
    return f"{names}fleet-{uuid.uuid4().hex[:6]}"


class PauseTests:
    def test_a_real_worker_shows_up_live_confirms_the_pause_and_resumes(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        stream = _stream(names)
        make_group(browser_redis, stream, "g")
        page.goto(_group_url(web_server, stream))
        expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")
        page.evaluate("window.__notReloaded = true")
        workers = page.locator("#group-workers")
        expect(workers).to_contain_text("No Ackboard worker has sent a heartbeat")
        worker = web_server.worker(
            "--stream", stream, "--group", "g", "--consumer", "fleet-w1",
            "--handler", "tests.browser.handlers:charge", "--block-ms", "200",
        )  # fmt: skip
        try:
            # Its first heartbeat, pushed live (the worker takes about a second to start).
            row = workers.locator('tr[data-worker="fleet-w1"]')
            expect(row).to_contain_text("live", timeout=20_000)
            assert page.evaluate("window.__notReloaded") is True
            expect(page.locator("#group-fleet")).to_contain_text(
                "Not paused: 1 Ackboard worker live."
            )

            page.locator("#group-fleet").get_by_role("button", name="Pause", exact=True).click()
            dialog = page.locator("dialog[open]")
            dialog.get_by_label("Reason (required)").fill("deploy")
            dialog.get_by_role("button", name="Pause", exact=True).click()
            banner = page.locator("#group-fleet")
            # The page reloads with the pause; the worker's confirmation is pushed live.
            expect(banner).to_contain_text(
                f"Paused by {web_server.username} (deploy), 1 of 1 worker confirmed, "
                "0 jobs still finishing.",
                timeout=10_000,
            )
            expect(row).to_contain_text("paused")
            expect(page.locator("#messages")).to_contain_text("Paused g")

            banner.get_by_role("button", name="Resume", exact=True).click()
            page.locator("dialog[open]").get_by_role("button", name="Resume", exact=True).click()
            expect(page.locator("#group-fleet")).to_contain_text(
                "Not paused: 1 Ackboard worker live."
            )
            expect(page.locator("#messages")).to_contain_text("Resumed g")
        finally:
            worker.terminate()
            assert worker.wait(timeout=15) == 0, "the worker stops cleanly on SIGTERM"
        # Its last heartbeat says it stopped: the row is greyed out as stopped at once (a
        # killed worker's would go stale after 10 s), pushed live.
        stopped = page.locator('#group-workers tr.stale.stopped[data-worker="fleet-w1"]')
        expect(stopped.locator("td[data-seen]")).to_contain_text("stopped", timeout=5_000)
        expect(page.locator("#group-fleet")).to_contain_text("Not paused: 0 Ackboard workers live.")


class RetireTests:
    def test_retire_from_a_consumer_row_hands_its_entries_over(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        stream = _stream(names)
        ids = make_pending(browser_redis, stream, "g", "old-1", 2)
        make_pending(browser_redis, stream, "g", "keeper", 1, create=False)
        page.goto(_group_url(web_server, stream))
        row = page.locator("#consumer-table tr", has_text="old-1")
        row.get_by_role("button", name="Retire", exact=True).click()
        dialog = page.locator("dialog[open]")
        expect(dialog).to_have_attribute("aria-label", "Retire consumer old-1")
        expect(dialog.locator('[data-fill="consumer"]')).to_have_text("old-1")
        # The consumer retired is not offered as the one to hand its entries to.
        expect(dialog.locator('select[name="to"] option[value="old-1"]')).to_be_disabled()
        dialog.locator('select[name="to"]').select_option("keeper")
        dialog.get_by_role("button", name="Retire", exact=True).click()
        expect(page.locator("#messages")).to_contain_text(
            "Retired consumer old-1: handed its 2 pending entries to keeper"
        )
        expect(page.locator("#consumer-table")).not_to_contain_text("old-1")
        rows = browser_redis.xpending_range(stream, "g", min="-", max="+", count=10)
        assert {
            r["message_id"].decode(): r["consumer"] for r in rows if r["message_id"].decode() in ids
        } == dict.fromkeys(ids, b"keeper")
