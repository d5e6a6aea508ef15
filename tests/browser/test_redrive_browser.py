"""Redrive in the system Chromium, with a real ``manage.py run_jobs`` runner: the
dead-letter page's Redrive button, its dry run, a canary whose outcomes a real worker
makes "processed" live, Continue, and the progress pushed live to the end; Pause and
Resume of a running job; Cancel of a running job; Stop after a canary that failed again.
Each checks the job (its panel and the server's JSON), the dead-letter stream, the audit
rows, and that no dead letter was replayed twice.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core import services
from queue_core.keys import ORIGIN_ID_FIELD, REPLAY_OF_FIELD, stream_keys
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


def _start(
    server: LiveServer, tmp: Path, *args: str, broken: bool = False
) -> subprocess.Popen[bytes]:
    """``manage.py <args>`` with the server's settings; ``broken``: the test handler
    dead-letters every entry (the downstream is still down)."""
    env = server.env()
    if broken:
        (tmp / "broken").touch()
    env.update(ACKBOARD_TEST_HANDLER_LOG=str(tmp / "handled.log"),
               ACKBOARD_TEST_BROKEN=str(tmp / ("broken" if broken else "not-broken")))  # fmt: skip
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


def _dead_letters(client: redis.Redis, stream: str, n: int) -> list[str]:
    """``n`` entries of group billing, dead-lettered; their (origin) ids, oldest first."""
    ids = make_pending(client, stream, "billing", "c1", n)
    for entry_id in ids:
        services.entry_dead_letter(client=client, stream=stream, group="billing",
                                   entry_id=entry_id, reason="payment gateway down")  # fmt: skip
    return ids


def _replays(client: redis.Redis, stream: str) -> Counter[str]:
    """How many times each original entry was replayed into ``stream``."""
    field = REPLAY_OF_FIELD.encode()
    return Counter(f[field].decode() for _, f in client.xrange(stream) if field in f)


def _job(page: Any, server: LiveServer, pk: int) -> dict[str, Any]:
    """The job as the server has it now (GET /redrive/<pk>/, the page's session)."""
    response = page.request.get(f"{server.url}/redrive/{pk}/")
    assert response.ok, response.text()
    job: dict[str, Any] = response.json()["job"]
    return job


def _audit(server: LiveServer, stream: str) -> list[tuple[str, str, str, list[str]]]:
    """(action, result, detail, new_ids) of the server's audit rows on ``stream``, in order."""
    db = sqlite3.connect(f"file:{server.workdir / 'db.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute(
            "SELECT action, result, detail, new_ids FROM dashboard_auditevent"
            " WHERE stream = ? ORDER BY id",
            (stream,),
        ).fetchall()
    finally:
        db.close()
    return [(a, r, d, json.loads(n)) for a, r, d, n in rows]


def _start_redrive(
    page: Any, server: LiveServer, stream: str, *, matched: int, canary: int, rate: float
) -> tuple[Any, int]:
    """Press Redrive on the dead-letter page: dry run, then Start. The job's panel, its id."""
    page.goto(f"{server.url}/streams/{stream}/dlq/")
    expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")
    page.locator("[data-redrive-open]").click()
    form = page.locator("#redrive-dialog form")
    form.locator("input[name=canary]").fill(str(canary))
    form.locator("input[name=rate]").fill(str(rate))
    form.locator("[data-redrive-dry-run]").click()
    expect(page.locator("#redrive-answer [data-redrive-count]")).to_have_attribute(
        "data-redrive-count", str(matched)
    )
    form.locator("[data-redrive-start]").click()  # the page reloads with the job's panel
    job = page.locator("#redrive-panel article.redrive-job").first
    expect(job).to_be_visible()
    pk = int(str(job.get_attribute("id")).removeprefix("redrive-job-"))
    return job, pk


def _still(page: Any, server: LiveServer, pk: int, client: redis.Redis, stream: str) -> int:
    """The job's replayed count, after checking it does not move for 1.5 s (at the rates
    below a running job would replay two or more in that time): Pause and Cancel hold."""
    before = _job(page, server, pk)
    dlq_before = client.xlen(stream_keys(stream).dlq)
    page.wait_for_timeout(1500)  # an observation of nothing happening, not a wait for it
    after = _job(page, server, pk)
    assert (after["state"], after["replayed"]) == (before["state"], before["replayed"])
    assert client.xlen(stream_keys(stream).dlq) == dlq_before
    return int(after["replayed"])


def test_redrive_pause_resume_and_cancel_a_running_job(
    page: Any,
    web_server: LiveServer,
    browser_redis: redis.Redis,
    names: str,
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    tag = uuid.uuid4().hex[:4]
    stream = f"{names}orders-pause-{tag}"
    originals = _dead_letters(browser_redis, stream, 10)
    processes.append(_start(web_server, tmp_path, "run_jobs", "--poll", "0.1"))

    # No canary: the job runs at once, at 2 replays a second.
    job, pk = _start_redrive(page, web_server, stream, matched=10, canary=0, rate=2)
    expect(job).to_have_attribute("data-redrive-state", "running")
    expect(job.locator("[data-redrive-replayed]")).not_to_have_text("0", timeout=15_000)
    job.locator('[data-redrive-action="pause"]').click()  # the page reloads
    expect(job).to_have_attribute("data-redrive-state", "paused")
    expect(job.locator("[data-redrive-badge]")).to_have_text("paused")
    expect(job.locator('[data-redrive-action="pause"]')).to_have_count(0)
    paused_at = _still(page, web_server, pk, browser_redis, stream)
    assert 0 < paused_at < 10
    expect(job.locator("[data-redrive-replayed]")).to_have_text(str(paused_at))
    assert browser_redis.xlen(stream_keys(stream).dlq) == 10 - paused_at

    job.locator('[data-redrive-action="resume"]').click()
    expect(job).to_have_attribute("data-redrive-state", "done", timeout=20_000)
    expect(job.locator("[data-redrive-replayed]")).to_have_text("10")
    done = _job(page, web_server, pk)
    assert (done["state"], done["replayed"], done["gone"], done["refused"]) == ("done", 10, 0, 0)
    assert browser_redis.xlen(stream_keys(stream).dlq) == 0
    assert _replays(browser_redis, stream) == Counter(originals)  # each exactly once
    audit = _audit(web_server, stream)
    replayed_rows = [new_ids for a, r, _, new_ids in audit if (a, r) == ("redrive-replay", "ok")]
    assert len(replayed_rows) == 10  # one audit row per replayed entry
    controls = [(a, r, d) for a, r, d, _ in audit if a not in ("redrive", "redrive-replay")]
    assert controls[:2] == [
        ("redrive-pause", "ok", f"redrive #{pk}: running -> paused"),
        ("redrive-resume", "ok", f"redrive #{pk}: paused -> running"),
    ]
    assert controls[2][:2] == ("redrive-finished", "ok")

    # Cancel a second job while it runs (1 replay a second); its confirm dialog is accepted.
    stream = f"{names}orders-cancel-{tag}"
    originals = _dead_letters(browser_redis, stream, 6)
    job, pk = _start_redrive(page, web_server, stream, matched=6, canary=0, rate=1)
    expect(job.locator("[data-redrive-replayed]")).not_to_have_text("0", timeout=15_000)
    dialogs: list[str] = []

    def accept(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    job.locator('[data-redrive-action="cancel"]').click()
    expect(job).to_have_attribute("data-redrive-state", "cancelled")
    assert dialogs == [f"Cancel redrive #{pk}? What it replayed stays replayed."]
    expect(job.locator(".redrive-controls")).to_have_count(0)  # a final job has none
    replayed = _still(page, web_server, pk, browser_redis, stream)
    assert 0 < replayed < 6
    expect(job.locator("[data-redrive-replayed]")).to_have_text(str(replayed))
    # What it replayed stays replayed, once each; the rest are still dead letters.
    assert _replays(browser_redis, stream) == Counter(originals[:replayed])
    left = browser_redis.xrange(stream_keys(stream).dlq)
    assert [f[ORIGIN_ID_FIELD.encode()].decode() for _, f in left] == originals[replayed:]
    expect(page.locator("#dlq-table tbody tr[id^=dlq-]")).to_have_count(6 - replayed)
    actions = [(a, r) for a, r, _, _ in _audit(web_server, stream)]
    assert actions == [("redrive", "ok"), *[("redrive-replay", "ok")] * replayed,
                       ("redrive-cancel", "ok")]  # fmt: skip


def test_redrive_stop_after_a_canary_that_failed_again(
    page: Any,
    web_server: LiveServer,
    browser_redis: redis.Redis,
    names: str,
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    """The downstream is still broken: the canary's two replays are dead-lettered again by
    the worker, the panel says so, and Stop ends the job with the other four untouched."""
    stream = f"{names}orders-stop-{uuid.uuid4().hex[:4]}"
    originals = _dead_letters(browser_redis, stream, 6)
    dlq = stream_keys(stream).dlq
    dlq_ids = [i.decode() for i, _ in browser_redis.xrange(dlq)]
    worker = ("queue_worker", "--stream", stream, "--group", "billing", "--handler", HANDLER)
    processes.append(_start(web_server, tmp_path, *worker, "--block-ms", "100", broken=True))
    processes.append(_start(web_server, tmp_path, "run_jobs", "--poll", "0.1"))

    job, pk = _start_redrive(page, web_server, stream, matched=6, canary=2, rate=20)
    expect(job).to_have_attribute("data-redrive-state", "waiting", timeout=20_000)
    failed = job.locator('tr[data-canary-outcome="failed again, dead-lettered"]')
    expect(failed).to_have_count(2, timeout=20_000)  # pushed live as the worker fails them
    expect(job.locator("[data-canary-summary]")).to_contain_text("0 processed, 2 failed again")
    canary = _job(page, web_server, pk)["canary_replays"]
    assert [c["origin_id"] for c in canary] == originals[:2]

    job.locator('[data-redrive-action="stop"]').click()
    expect(job).to_have_attribute("data-redrive-state", "cancelled")
    expect(job.locator(".redrive-controls")).to_have_count(0)
    stopped = _job(page, web_server, pk)
    assert (stopped["state"], stopped["replayed"]) == ("cancelled", 2)
    # The four the canary did not take are the same dead letters; the canary's two came
    # back as new ones (naming their replay as the origin), which the job never replays.
    left = browser_redis.xrange(dlq)
    assert [i.decode() for i, _ in left[:4]] == dlq_ids[2:]
    back = sorted(f[ORIGIN_ID_FIELD.encode()].decode() for _, f in left[4:])
    assert back == sorted(c["new_id"] for c in canary)
    assert _replays(browser_redis, stream) == Counter(originals[:2])
    audit = _audit(web_server, stream)
    replay = ("redrive-replay", "ok")
    assert [(a, r) for a, r, _, _ in audit] == [
        ("redrive", "ok"), replay, replay, ("redrive-stop", "ok"),
    ]  # fmt: skip
    assert audit[3][2] == f"redrive #{pk}: waiting -> cancelled"
    assert sorted(audit[3][3]) == sorted(c["new_id"] for c in canary)
    assert sorted(audit[1][3] + audit[2][3]) == sorted(c["new_id"] for c in canary)
