"""Redrive in the system Chromium (issue 14): the dead-letter page's Redrive button, its
dry run, a canary whose outcomes a real worker makes "processed" live, Continue, and the
progress pushed live to the end, with a real ``manage.py run_jobs`` runner.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core import services
from tests.browser.server import LiveServer, screenshot
from tests.factories import make_pending

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "tests.integration.redrive_handlers:handle"


@pytest.fixture
def processes(web_server: LiveServer, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _start(server: LiveServer, tmp: Path, *args: str) -> subprocess.Popen[bytes]:
    env = server.env()
    env.update(ACKBOARD_TEST_HANDLER_LOG=str(tmp / "handled.log"),
               ACKBOARD_TEST_BROKEN=str(tmp / "not-broken"))  # fmt: skip
    err = (tmp / "proc.err").open("ab")
    argv = [sys.executable, "manage.py", *args]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)


def test_redrive_dry_run_canary_continue_and_live_progress(
    page: Any,
    web_server: LiveServer,
    browser_redis: redis.Redis,
    names: str,
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    stream = f"{names}orders-redrive-{uuid.uuid4().hex[:4]}"
    for entry_id in make_pending(browser_redis, stream, "billing", "c1", 12):
        services.entry_dead_letter(client=browser_redis, stream=stream, group="billing",
                                   entry_id=entry_id, reason="payment gateway down")  # fmt: skip
    worker = ("queue_worker", "--stream", stream, "--group", "billing", "--handler", HANDLER)
    processes.append(_start(web_server, tmp_path, *worker, "--block-ms", "100"))
    processes.append(_start(web_server, tmp_path, "run_jobs", "--poll", "0.1"))

    page.goto(f"{web_server.url}/streams/{stream}/dlq/")
    expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")
    page.locator("[data-redrive-open]").click()
    form = page.locator("#redrive-dialog form")
    form.get_by_label("Origin group").fill("billing")
    form.locator("input[name=canary]").fill("3")
    form.locator("input[name=rate]").fill("20")
    form.locator("[data-redrive-dry-run]").click()
    expect(page.locator("#redrive-answer")).to_contain_text("12 dead letters would be replayed")

    form.locator("[data-redrive-start]").click()  # the page reloads with the job's panel
    job = page.locator("#redrive-panel article.redrive-job").first
    expect(job).to_have_attribute("data-redrive-state", "waiting", timeout=20_000)
    page.evaluate("window.__notReloaded = true")
    processed = job.locator('tr[data-canary-outcome="processed"]')
    expect(processed).to_have_count(3, timeout=20_000)  # pushed live as the worker acks
    expect(job.locator("[data-canary-summary]")).to_contain_text("3 processed, 0 failed again")
    assert page.evaluate("window.__notReloaded") is True
    screenshot(page, "redrive-canary")

    job.locator('[data-redrive-action="continue"]').click()
    job = page.locator("#redrive-panel article.redrive-job").first
    expect(job).to_have_attribute("data-redrive-state", "done", timeout=20_000)
    expect(job.locator("[data-redrive-replayed]")).to_have_text("12")
    expect(page.locator("#dlq-table tbody td.empty")).to_be_visible()
