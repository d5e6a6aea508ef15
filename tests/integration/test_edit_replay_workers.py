"""Edit & replay with a real worker process.

A poison entry (a negative amount) is dead-lettered by ``manage.py queue_worker``; the
operator edits its payload on the dashboard and replays it; the worker charges the new
entry; the dead letter is then settled (deleted) by run_jobs's sweep, and the
audit row still holds the original payload.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.models import AuditEvent
from queue_core.edited_replays import edited_replays_sweep
from queue_core.keys import stream_keys
from tests.factories import make_group, make_user
from tests.integration.test_worker_cli import start_worker, worker_env
from tests.queue_core.worker.helpers import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.one_engine]

POISON = '{"amount": -5, "customer": "c-1"}'


@pytest.fixture
def worker(
    redis_url: str, stream: str, tmp_path: Path, r: redis.Redis
) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    log = tmp_path / "handler.log"
    log.touch()
    make_group(r, stream, "g")
    proc = start_worker(
        worker_env(redis_url, log),
        "--stream", stream, "--group", "g", "--consumer", "w1", "--block-ms", "100",
        "--handler", "tests.integration.edit_replay_handlers:charge",
    )  # fmt: skip
    yield proc, log
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_edited_poison_is_processed_then_settled_and_audit_keeps_the_original(
    worker: tuple[subprocess.Popen[str], Path],
    r: redis.Redis,
    stream: str,
    redis_url: str,
    settings: SettingsWrapper,
    django_user_model: type,
) -> None:
    proc, log = worker
    settings.ACKBOARD_REDIS_URL = redis_url
    dlq = stream_keys(stream).dlq
    origin = r.xadd(stream, {"payload": POISON}).decode()
    wait_until(lambda: r.xlen(dlq) == 1, timeout=30, what="the worker to dead-letter the poison")
    [(raw_id, _)] = r.xrange(dlq)
    dlq_id = raw_id.decode()
    assert log.read_text() == ""

    client = Client()
    client.force_login(
        make_user(django_user_model, "eddie", "view_queues", "edit_replay_dead_letter")
    )
    response = client.post(
        reverse("dashboard:dlq-edit-replay", args=[stream, dlq_id]),
        {
            "field_orig": ["0"],
            "field_name": ["payload"],
            "field_value": ['{\n  "amount": 5,\n  "customer": "c-1"\n}'],
            "field_mode": ["json"],
            "reason": "sign typo",
        },
    )
    assert response.status_code == 303, response.content
    event = AuditEvent.objects.get(action="edit-replay")
    [new_id] = event.new_ids

    wait_until(
        lambda: f"charged {new_id} 5 edited=1" in log.read_text(),
        timeout=30,
        what="the worker to charge the edited entry",
    )

    # The sweep settles it once the group has acknowledged the new entry.
    def settled() -> bool:
        edited_replays_sweep(r)
        return r.xlen(dlq) == 0

    wait_until(settled, timeout=30, what="the dead letter to be settled")
    assert not r.exists(stream_keys(stream).dlq_edits)
    assert r.xpending(stream, "g")["pending"] == 0
    # The audit row keeps the original payload: nothing is lost.
    before = event.state_before["diff"]["changed"]["payload"]["before"]
    assert before == POISON
    assert json.loads(event.state_before["diff"]["changed"]["payload"]["after"])["amount"] == 5
    assert event.state_before["origin_id"] == origin
    assert proc.poll() is None
