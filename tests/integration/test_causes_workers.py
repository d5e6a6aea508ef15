"""Failures by cause with real worker processes (``manage.py queue_worker --processes 2``).

300 entries fail for three causes, each message carrying its own ids and numbers; the
ingestor stores them and the Failures page's by-cause view shows exactly 3 fingerprints
of 100 attempts and 100 pending entries each. Then one cause is "fixed" (its handler
succeeds from now on) and a Retry scoped to that cause's fingerprint, through the page's
bulk action (dry run, confirm), makes only its 100 entries due: the workers process them,
and the other 200 stay pending, untouched (delivered once, never retried).
Handlers are in tests/integration/cause_handlers.py.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.contrib.auth.models import User
from django.test import Client
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.insight.failure_index import failures_ingest
from dashboard.models import AuditEvent, IndexedFailure
from queue_core.keys import stream_keys
from tests.factories import make_group, make_user
from tests.html import element_text, table_rows
from tests.integration.test_worker_cli import worker_env
from tests.queue_core.worker.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "tests.integration.cause_handlers:fail"
CAUSES = ("timeout", "key", "decline")

pytestmark = [pytest.mark.django_db, pytest.mark.one_engine]


@pytest.fixture
def fleet(
    tmp_path: Path, redis_url: str, stream: str, r: redis.Redis
) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    make_group(r, stream, "g")
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    log = tmp_path / "handler.log"
    log.touch()
    env = worker_env(redis_url, log, ACKBOARD_TEST_FIXED_DIR=str(fixed))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "queue_worker", "--stream", stream,
         "--group", "g", "--handler", HANDLER, "--processes", "2", "--block-ms", "100",
         "--min-idle-ms", "30000", "--reclaim-interval-ms", "200", "--max-deliveries", "50"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "fleet.err").open("wb"),
    )  # fmt: skip
    try:
        yield proc, fixed, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        # Shown by pytest only when the test failed: what the workers said.
        print((tmp_path / "fleet.err").read_text(errors="replace")[-4000:])


def test_three_causes_then_a_scoped_retry_of_the_fixed_one(
    fleet: tuple[subprocess.Popen[bytes], Path, Path],
    r: redis.Redis,
    stream: str,
    redis_url: str,
    prefix: str,
    settings: SettingsWrapper,
    django_user_model: type[User],
) -> None:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_RETRY_IDLE_MS = 30_000  # the workers' min idle: retried is due
    settings.ACKBOARD_BULK_CAP = 1000
    settings.ACKBOARD_FAILURE_SEARCH_MS = 30_000  # a loaded machine's stall is not "too broad"
    _, fixed, log = fleet
    pipe = r.pipeline(transaction=False)
    for n in range(300):
        pipe.xadd(stream, {"cause": CAUSES[n % 3], "n": str(n)})
    ids = [i.decode() for i in pipe.execute()]
    by_cause = {c: ids[k::3] for k, c in enumerate(CAUSES)}

    failures = stream_keys(stream).failures
    wait_until(lambda: r.xlen(failures) >= 300, timeout=60)
    assert failures_ingest(client=r) == 300
    assert IndexedFailure.objects.filter(stream=stream).count() == 300

    user = make_user(django_user_model, "olga-causes", "view_queues", "retry_entry")
    client = Client()
    client.force_login(user)
    page = client.get("/failures/", {"view": "causes", "stream": stream}).content.decode()
    rows = {k.removeprefix("cause-"): v for k, v in table_rows(page, "cause-").items()}
    assert len(rows) == 3
    assert sorted(row[2:4] for row in rows.values()) == [["100", "100"]] * 3

    # Which fingerprint is the key errors'?
    fp_of = dict(
        IndexedFailure.objects.filter(stream=stream).values_list("entry_id", "fingerprint")
    )
    key_fp = fp_of[by_cause["key"][0]]
    assert {fp_of[i] for i in by_cause["key"]} == {key_fp}
    assert "KeyError" in rows[key_fp][0]

    # The fix ships; retry only that cause.
    (fixed / "key").touch()
    url = f"/streams/{stream}/groups/g/bulk/retry/"
    form = {"snapshot_id": ids[-1], "scope": "filter", "fingerprint": key_fp}
    dry = client.post(url, form, headers={"HX-Request": "true"})
    assert "100 entries whose last failure has cause" in element_text(
        dry.content.decode(), "bulk-result"
    )
    done = client.post(url, {**form, "confirm": "1"}, headers={"HX-Request": "true"})
    assert done.status_code == 200
    audit = AuditEvent.objects.get(action="bulk-retry")
    assert audit.state_before["fingerprint"] == key_fp
    assert sorted(audit.entry_ids) == sorted(by_cause["key"])

    def processed() -> list[str]:
        return [line.split()[1] for line in log.read_text().splitlines()]

    def pending_ids() -> list[str]:
        return [p["message_id"].decode() for p in r.xpending_range(stream, "g", "-", "+", 1000)]

    wait_until(lambda: len(processed()) >= 100, timeout=60)
    assert sorted(processed()) == sorted(by_cause["key"])
    # The handler logs before the worker acks (acks are batched after the handlers), so
    # wait for the acks too: the pending list shrinks to exactly the other causes.
    wait_until(lambda: len(pending_ids()) <= 200, timeout=60)
    # The other causes: still pending, delivered once, never retried.
    rows_left = r.xpending_range(stream, "g", "-", "+", 1000)
    assert sorted(p["message_id"].decode() for p in rows_left) == sorted(
        by_cause["timeout"] + by_cause["decline"]
    )
    assert {p["times_delivered"] for p in rows_left} == {1}
    assert all(p["time_since_delivered"] < 30_000 for p in rows_left)
