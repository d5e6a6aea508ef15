"""Reset position, Trim and Delete group refuse what they must, with a real worker.

Each test runs ``manage.py queue_worker`` as a process in its own session (stopped with
SIGTERM, killed with ``os.killpg`` if a test fails) and acts through the dashboard's own
views (django's test Client, an operator with the needed permissions), checking the answer,
Redis (XINFO GROUPS, XLEN, XRANGE, XPENDING) and the audit row.

The handler is tests/integration/cause_handlers.py ``fail``: an entry with a ``cause`` field
raises (it stays pending on the worker's consumer: ``--min-idle-ms`` is 10 minutes, so no
sweep takes it back), an entry without one succeeds and logs ``done <id> <deliveries>``
(its cause is "", and ``ACKBOARD_TEST_FIXED_DIR / ""`` is the directory itself, which
exists). Delete group refuses while a worker of the group is live; right after w1's clean
stop its last heartbeat says it stopped, so the delete needs no wait for it to go stale
(``HEARTBEAT_STALE_MS``, 10 s).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.models import AuditEvent
from queue_core.clock import now_ms
from queue_core.control import HEARTBEAT_STALE_MS, heartbeats_read, pause_read
from tests.factories import add_entries, make_group, make_user
from tests.html import element_text
from tests.integration.worker_process import WorkerProcess
from tests.queue_core.worker.helpers import failures, wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.one_engine]

HANDLER = "tests.integration.cause_handlers:fail"
HTMX = {"HX-Request": "true"}
#: Reading, pausing, administering groups and trimming streams.
OPERATOR = ("view_queues", "pause_group", "administer_group", "trim_stream")
#: Fields of an entry whose handler fails (it stays pending).
FAILS = {"cause": "timeout", "n": "1"}


@pytest.fixture
def worker(redis_url: str, stream: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    started = WorkerProcess(
        redis_url, stream, tmp_path, handler=HANDLER, args=("--min-idle-ms", "600000"),
        ACKBOARD_TEST_FIXED_DIR=str(fixed),
    )  # fmt: skip
    try:
        yield started
    finally:
        started.kill()


@pytest.fixture
def operator(settings: SettingsWrapper, redis_url: str, django_user_model: Any) -> Client:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STUCK_AFTER_MS = 60_000
    client = Client()
    client.force_login(make_user(django_user_model, "olga-admin-workers", *OPERATOR))
    return client


def group_url(stream: str, action: str) -> str:
    return reverse("dashboard:group-action", args=[stream, "g", action])


def stream_url(stream: str, action: str) -> str:
    return reverse("dashboard:stream-action", args=[stream, action])


def message(response: Any) -> str:
    return element_text(response.content.decode(), "messages")


def last_audit() -> AuditEvent:
    return AuditEvent.objects.order_by("-id")[0]


def group_row(r: redis.Redis, stream: str) -> dict[str, Any]:
    [row] = [g for g in r.xinfo_groups(stream) if g["name"] == b"g"]
    return dict(row)


def position(r: redis.Redis, stream: str) -> tuple[str, int]:
    row = group_row(r, stream)
    return row["last-delivered-id"].decode(), int(row["entries-read"])


def pending_ids(r: redis.Redis, stream: str) -> list[str]:
    rows = r.xpending_range(stream, "g", min="-", max="+", count=100)
    return [row["message_id"].decode() for row in rows]


def stream_ids(r: redis.Redis, stream: str) -> list[str]:
    return [entry_id.decode() for entry_id, _ in r.xrange(stream)]


def live_beat(r: redis.Redis, stream: str) -> Callable[[], bool]:
    """w1 has a heartbeat written since this was called."""
    since = now_ms()

    def check() -> bool:
        beats = {b.consumer: b for b in heartbeats_read(client=r, stream=stream, group="g")}
        return "w1" in beats and beats["w1"].seen_ms >= since

    return check


def handled(
    r: redis.Redis, stream: str, worker: WorkerProcess, ok: list[str], failed: list[str]
) -> Callable[[], bool]:
    """The worker completed ``ok``, failed on ``failed`` (recorded, still pending on w1),
    and the group has nothing left to deliver."""

    def check() -> bool:
        recorded = {f.get("entry_id") for f in failures(r, stream)}
        return (
            Counter(worker.done()) == Counter(ok)
            and recorded >= set(failed)
            and pending_ids(r, stream) == failed
            and group_row(r, stream)["lag"] == 0
        )

    return check


class ResetPositionWithWorkerTests:
    def test_refused_while_the_worker_reads_accepted_once_it_confirmed_the_pause(
        self, r: redis.Redis, stream: str, worker: WorkerProcess, operator: Client
    ) -> None:
        make_group(r, stream, "g")
        ids = add_entries(r, stream, 6)
        worker.start()
        wait_until(handled(r, stream, worker, ids, []), timeout=60, what="the 6 entries handled")
        wait_until(live_beat(r, stream), timeout=10, what="w1's heartbeat")
        assert position(r, stream) == (ids[5], 6)

        # The dry run says the reset would be refused, and why.
        preview_url = reverse("dashboard:reset-preview", args=[stream, "g"])
        html = operator.post(preview_url, {"position": "id", "at": ids[1]}, headers=HTMX)
        assert element_text(html.content.decode(), "reset-effect") == (
            "4 entries would be delivered again."
        )
        assert "live consumers (w1): pause it first" in element_text(
            html.content.decode(), "reset-refusal"
        )
        # The confirm is refused: nothing moved.
        reset = {"position": ids[1], "expected_before_id": ids[5], "confirm": "1"}
        response = operator.post(group_url(stream, "reset-position"), reset, headers=HTMX)
        assert response.status_code == 409, response.content
        assert "'g' has live consumers (w1): pause the group first" in message(response)
        assert position(r, stream) == (ids[5], 6)
        event = last_audit()
        assert (event.action, event.result, event.group) == ("reset-position", "refused", "g")

        # Pause; once w1 confirms it in its heartbeat the same reset goes ahead.
        response = operator.post(group_url(stream, "pause"), {"reason": "reset"}, headers=HTMX)
        assert response.status_code == 200, response.content
        paused = pause_read(client=r, stream=stream, group="g")
        assert paused is not None and (paused.by, paused.reason) == ("olga-admin-workers", "reset")

        def confirmed() -> bool:
            beats = heartbeats_read(client=r, stream=stream, group="g")
            return any(b.consumer == "w1" and b.confirms(paused) for b in beats)

        wait_until(confirmed, timeout=10, what="w1 to confirm the pause")
        html = operator.post(preview_url, {"position": "id", "at": ids[1]}, headers=HTMX)
        assert 'id="reset-refusal"' not in html.content.decode()
        response = operator.post(group_url(stream, "reset-position"), reset, headers=HTMX)
        assert response.status_code == 200, response.content
        row = group_row(r, stream)
        assert (row["last-delivered-id"].decode(), row["entries-read"], row["lag"]) == (
            ids[1], 2, 4,
        )  # fmt: skip
        event = last_audit()
        assert (event.action, event.result) == ("reset-position", "ok")
        assert event.state_before["before_id"] == ids[5]
        assert event.state_before["before_entries_read"] == 6
        assert event.state_before["after_id"] == ids[1]
        assert event.state_before["redeliver"] == 4
        assert worker.alive()
        assert len(worker.done()) == 6  # paused: nothing delivered again yet

        # Resume: the worker handles the 4 entries after the new position once more.
        response = operator.post(group_url(stream, "resume"), headers=HTMX)
        assert response.status_code == 200, response.content
        again = ids + ids[2:]
        wait_until(handled(r, stream, worker, again, []), timeout=15, what="the redelivery")
        assert position(r, stream) == (ids[5], 6)
        worker.stop()


class TrimWithWorkerTests:
    def test_refused_past_the_workers_oldest_pending_entry_unless_forced_by_name(
        self, r: redis.Redis, stream: str, worker: WorkerProcess, operator: Client
    ) -> None:
        make_group(r, stream, "g")
        # 2 handled, 2 that fail (pending on w1), 2 handled.
        ids = add_entries(r, stream, 2) + add_entries(r, stream, 2, fields=FAILS)
        ids += add_entries(r, stream, 2)
        held = ids[2:4]
        worker.start()
        ok = ids[:2] + ids[4:]
        wait_until(handled(r, stream, worker, ok, held), timeout=60, what="4 handled, 2 failed")
        trim_url = reverse("dashboard:trim-preview", args=[stream])

        # Past the floor (the oldest pending entry): the dry run says so, the trim is refused.
        html = operator.post(trim_url, {"minid": ids[5]}, headers=HTMX).content.decode()
        assert element_text(html, "trim-count").startswith("5 entries older than")
        assert element_text(html, "trim-floor") == (
            f"The floor is {held[0]}: group g (its oldest pending entry)."
        )
        assert 'id="trim-past-floor"' in html
        data = {"minid": ids[5], "confirm": "1"}
        response = operator.post(stream_url(stream, "trim"), data, headers=HTMX)
        assert response.status_code == 409, response.content
        assert f"MINID {ids[5]} is past the floor {held[0]}" in message(response)
        assert r.xlen(stream) == 6 and stream_ids(r, stream) == ids
        assert pending_ids(r, stream) == held
        event = last_audit()
        assert (event.action, event.result) == ("trim", "refused")

        # Up to the floor: accepted; the pending entries are still readable.
        html = operator.post(trim_url, {"minid": held[0]}, headers=HTMX).content.decode()
        assert element_text(html, "trim-count").startswith("2 entries older than")
        assert 'id="trim-past-floor"' not in html
        data = {"minid": held[0], "confirm": "1"}
        response = operator.post(stream_url(stream, "trim"), data, headers=HTMX)
        assert response.status_code == 200, response.content
        assert stream_ids(r, stream) == ids[2:]
        assert [e.decode() for e, _ in r.xrange(stream, held[0], held[1])] == held
        event = last_audit()
        assert (event.action, event.result) == ("trim", "ok")
        assert event.state_before["deleted"] == 2 and event.state_before["force"] is False

        # Forced past the floor: a wrong name is refused, the stream's name goes through.
        forced = {"minid": ids[5], "confirm": "1", "force": "1", "confirm_name": stream + "x"}
        response = operator.post(stream_url(stream, "trim"), forced, headers=HTMX)
        assert response.status_code == 400, response.content
        assert "needs the stream's name typed exactly" in message(response)
        assert stream_ids(r, stream) == ids[2:]
        assert (last_audit().action, last_audit().result) == ("trim", "refused")
        forced["confirm_name"] = stream
        response = operator.post(stream_url(stream, "trim"), forced, headers=HTMX)
        assert response.status_code == 200, response.content
        assert stream_ids(r, stream) == ids[5:]
        event = last_audit()
        assert (event.action, event.result) == ("trim", "ok")
        assert event.state_before["deleted"] == 3 and event.state_before["force"] is True
        assert worker.alive()
        worker.stop()


class DeleteGroupWithWorkerTests:
    def test_refused_while_pending_unless_acknowledged_with_a_reason(
        self, r: redis.Redis, stream: str, worker: WorkerProcess, operator: Client
    ) -> None:
        make_group(r, stream, "g")
        ids = add_entries(r, stream, 3, fields=FAILS) + add_entries(r, stream, 1)
        held = ids[:3]
        worker.start()
        wait_until(handled(r, stream, worker, ids[3:], held), timeout=60, what="3 failed")
        delete = {"confirm_name": "g", "expected_pending": "3"}
        acknowledged = {**delete, "acknowledge": "1", "reason": "retired app"}

        # While the worker runs even an acknowledged delete is refused: it would create
        # the group again.
        response = operator.post(group_url(stream, "delete-group"), acknowledged, headers=HTMX)
        assert response.status_code == 409, response.content
        assert "'g' has running workers (w1)" in message(response)
        assert pending_ids(r, stream) == held
        worker.stop()
        assert pending_ids(r, stream) == held  # a failed entry stays pending after a stop
        # Its last heartbeat says it stopped: not live at once, though younger than
        # HEARTBEAT_STALE_MS, so the delete goes on to the pending check without a wait.
        [last] = heartbeats_read(client=r, stream=stream, group="g")
        assert last.stopped_ms is not None and now_ms() - last.seen_ms < HEARTBEAT_STALE_MS

        response = operator.post(group_url(stream, "delete-group"), delete, headers=HTMX)
        assert response.status_code == 409, response.content
        assert "3 entries are pending in 'g'" in message(response)
        assert pending_ids(r, stream) == held
        event = last_audit()
        assert (event.action, event.result) == ("delete-group", "refused")

        no_reason = {**delete, "acknowledge": "1"}
        response = operator.post(group_url(stream, "delete-group"), no_reason, headers=HTMX)
        assert response.status_code == 400, response.content
        assert "needs a reason" in message(response)
        assert pending_ids(r, stream) == held

        response = operator.post(group_url(stream, "delete-group"), acknowledged, headers=HTMX)
        assert response.status_code == 200, response.content
        assert r.xinfo_groups(stream) == []
        assert stream_ids(r, stream) == ids  # the entries stay; only the group went
        event = last_audit()
        assert (event.action, event.result, event.reason) == ("delete-group", "ok", "retired app")
        assert event.state_before["pending_dropped"] == 3
