"""The Failures page's "by cause" view in the system Chromium: a new cause appears without
a reload (the table refreshes itself), and Acknowledge on a cause's row goes through the
bulk dry run and Confirm, touching only that cause's pending entries. Then Retry (past one
request's cap, so Confirm and Continue), Dead-letter and Acknowledge, each pressed in its
cause's row, checked in Redis (XPENDING, the dead-letter stream) and in the server's audit
rows (the fingerprint named), with a fourth cause left untouched."""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core.failures import failure_from_exception, failures_record
from queue_core.keys import ORIGIN_ID_FIELD, stream_keys
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


def _fail_all(
    client: redis.Redis, stream: str, group: str, failures: list[tuple[str, tuple[str, str]]]
) -> None:
    """What a pool of workers writes when handlers raise: one failure record per
    (entry id, (error type, message)), in one pipelined burst."""
    records = []
    for entry_id, (error_type, message) in failures:
        try:
            raise type(error_type, (Exception,), {})(message)
        except Exception as raised:
            record = failure_from_exception(
                raised, group=group, entry_id=entry_id, consumer="w1", attempt=1, duration_ms=3.0
            )
            records.append(record)
    failures_record(client=client, stream=stream, records=records)


def _audit(server: LiveServer, stream: str, action: str) -> list[dict[str, Any]]:
    """The server's audit rows of ``action`` on ``stream``, oldest first (read-only)."""
    db = sqlite3.connect(f"file:{server.workdir / 'db.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute(
            "SELECT result, detail, reason, entry_ids, state_before FROM dashboard_auditevent"
            " WHERE stream = ? AND action = ? ORDER BY id",
            (stream, action),
        ).fetchall()
    finally:
        db.close()
    return [
        {"result": r[0], "detail": r[1], "reason": r[2], "entry_ids": json.loads(r[3]),
         "state_before": json.loads(r[4])}
        for r in rows
    ]  # fmt: skip


def _pending(client: redis.Redis, stream: str, group: str) -> dict[str, int]:
    """Pending entry id -> milliseconds since its last delivery."""
    return {
        p["message_id"].decode(): p["time_since_delivered"]
        for p in client.xpending_range(stream, group, min="-", max="+", count=5000)
    }


def test_retry_dead_letter_and_acknowledge_each_touch_only_their_cause(
    page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
) -> None:
    """Four causes in one group, interleaved: Retry of the biggest one (more than one
    request's cap, so its Continue too), Dead-letter of one and Acknowledge of another,
    each pressed in its cause's row; the fourth cause is never touched."""
    stream = f"{names}cause-acts-{uuid.uuid4().hex[:6]}"
    ids = make_pending(browser_redis, stream, "g", "w1", 1030)
    kinds = {7: "key", 107: "decline", 50: "reset"}  # by n % 200; the rest time out
    by_kind: dict[str, list[str]] = {"timeout": [], "key": [], "decline": [], "reset": []}

    def error(kind: str, n: int) -> tuple[str, str]:
        """Each cause's messages differ in their numbers and ids only."""
        return {
            "timeout": ("TimeoutError", f"payment gateway timed out after {1000 + n} ms"),
            "key": ("KeyError", f"'customer_{n}'"),
            "decline": ("ValueError", f"card ending {4000 + n} declined"),
            "reset": ("ConnectionResetError", f"[Errno 104] reset by 10.0.0.{n % 250}"),
        }[kind]

    failures = []
    for n, entry_id in enumerate(ids):
        kind = kinds.get(n % 200, "timeout")
        by_kind[kind].append(entry_id)
        failures.append((entry_id, error(kind, n)))
    count = {kind: len(entries) for kind, entries in by_kind.items()}
    assert count == {"timeout": 1014, "key": 6, "decline": 5, "reset": 5}
    _fail_all(browser_redis, stream, "g", failures)
    web_server._manage("ingest_failures", "--once")

    page.goto(f"{web_server.url}/failures/?view=causes&stream={stream}")
    rows = page.locator("#cause-table tbody tr[data-fingerprint]")
    expect(rows).to_have_count(4)
    row = {
        "timeout": rows.filter(has_text="TimeoutError"),
        "key": rows.filter(has_text="KeyError"),
        "decline": rows.filter(has_text="ValueError"),
        "reset": rows.filter(has_text="ConnectionResetError"),
    }
    expect(row["timeout"].locator(".cause-pending")).to_have_text(str(count["timeout"]))
    fp = {kind: str(r.get_attribute("data-fingerprint")) for kind, r in row.items()}
    assert len(set(fp.values())) == 4
    result = page.locator("#bulk-result")
    delivered = _pending(browser_redis, stream, "g")
    assert max(delivered.values()) < 30_000  # ACKBOARD_RETRY_IDLE_MS: none is due yet

    # Retry the timeouts: more than one request's cap (ACKBOARD_BULK_CAP, 1000 by default),
    # so Confirm, then Continue.
    row["timeout"].get_by_role("button", name="Retry…").click()
    expect(result.locator("p").first).to_contain_text(
        f"1000 entries whose last failure has cause {fp['timeout']}"
    )
    expect(result).to_contain_text("More may match after these")
    assert _audit(web_server, stream, "bulk-retry") == []  # a dry run changes nothing
    result.get_by_role("button", name="Confirm retry of 1000").click()
    expect(result.locator(".card p").first).to_contain_text("1000 done")
    expect(result.locator(".card p").first).to_contain_text("More remain.")
    result.get_by_role("button", name="Continue").click()
    expect(result.locator(".card p").first).to_contain_text(f"{count['timeout']} done")
    expect(result.locator(".card p").first).to_contain_text("Finished.")
    idle = _pending(browser_redis, stream, "g")
    assert len(idle) == 1030  # a retry keeps them pending, made due (idle >= 30 s)
    assert {i for i, ms in idle.items() if ms >= 30_000} == set(by_kind["timeout"])
    retried = _audit(web_server, stream, "bulk-retry")
    assert [a["result"] for a in retried] == ["ok", "ok"]
    assert [len(a["entry_ids"]) for a in retried] == [1000, count["timeout"] - 1000]
    assert sorted(i for a in retried for i in a["entry_ids"]) == sorted(by_kind["timeout"])
    assert all(a["state_before"]["fingerprint"] == fp["timeout"] for a in retried)
    assert all(fp["timeout"] in a["detail"] for a in retried)

    # Dead-letter the KeyErrors: six, in one step.
    dlq = stream_keys(stream).dlq
    assert browser_redis.xlen(dlq) == 0
    page.fill("#cause-reason", "customer records were deleted upstream")
    row["key"].get_by_role("button", name="Dead-letter…").click()
    expect(result.locator("p").first).to_contain_text(
        f"6 entries whose last failure has cause {fp['key']}"
    )
    result.get_by_role("button", name="Confirm dead-letter of 6").click()
    expect(result.locator(".card p").first).to_contain_text("6 done")
    dead = browser_redis.xrange(dlq)
    assert sorted(f[ORIGIN_ID_FIELD.encode()].decode() for _, f in dead) == sorted(by_kind["key"])
    assert set(_pending(browser_redis, stream, "g")) == set(ids) - set(by_kind["key"])
    (dead_lettered,) = _audit(web_server, stream, "bulk-dead-letter")
    assert sorted(dead_lettered["entry_ids"]) == sorted(by_kind["key"])
    assert dead_lettered["state_before"]["fingerprint"] == fp["key"]
    assert dead_lettered["reason"] == "customer records were deleted upstream"

    # Acknowledge the declines (this one requires a reason).
    page.fill("#cause-reason", "declined cards: the customers were told")
    row["decline"].get_by_role("button", name="Acknowledge…").click()
    expect(result.locator("p").first).to_contain_text(
        f"5 entries whose last failure has cause {fp['decline']}"
    )
    result.get_by_role("button", name="Confirm acknowledge of 5").click()
    expect(result.locator(".card p").first).to_contain_text("5 done")
    (acked,) = _audit(web_server, stream, "bulk-acknowledge")
    assert sorted(acked["entry_ids"]) == sorted(by_kind["decline"])
    assert acked["state_before"]["fingerprint"] == fp["decline"]
    assert acked["reason"] == "declined cards: the customers were told"

    # What is left: the retried timeouts and the untouched resets, still pending, the
    # resets not made due; the DLQ holds the six KeyErrors only.
    idle = _pending(browser_redis, stream, "g")
    assert set(idle) == set(by_kind["timeout"]) | set(by_kind["reset"])
    assert all(idle[i] < 30_000 for i in by_kind["reset"])
    assert browser_redis.xlen(dlq) == 6
    # The table says so too (it refreshes itself every 5 s; a reload is the same view now).
    page.reload()
    expected = {"timeout": str(count["timeout"]), "key": "0", "decline": "0", "reset": "5"}
    for kind, pending in expected.items():
        expect(row[kind].locator(".cause-pending")).to_have_text(pending)
