"""The failure ingestor among hostile events: whatever anyone PUBLISHes on the events
channel, ``manage.py ingest_failures`` keeps running and keeps the index fresh.

``failure_event`` is fed hostile JSON directly (hypothesis, 100 inputs); then a running
``manage.py ingest_failures`` (production settings) gets deep JSON by a real PUBLISH and
must still index a failure announced after it, woken by its event (the poll is minutes).
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from hypothesis import given, settings

from dashboard.insight.failure_index.ingestor import failure_event
from queue_core.events import event_message
from queue_core.keys import EVENTS_CHANNEL
from tests.factories import add_failure
from tests.hostile_json import hostile_json
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]
DEEP = ["[" * 1000 + "]" * 1000, '{"type": "failure", "stream": ' + "[" * 100_000, "{" * 5000]


class FailureEventTests:
    @settings(max_examples=100, deadline=None)
    @given(raw=hostile_json())
    def test_hostile_events_are_not_failure_events(self, raw: str) -> None:
        assert failure_event(raw) is False or raw.lstrip().startswith("{")
        assert failure_event(raw.encode()) == failure_event(raw)

    def test_what_is_not_text_is_not_an_event(self) -> None:
        assert failure_event(None) is False and failure_event(12) is False

    def test_a_real_failure_event_is_one(self) -> None:
        assert failure_event(event_message(type="failure", stream="s", group="g")) is True

    def test_an_unreadable_event_is_logged_once_a_minute(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="ackboard.failures"):
            for raw in DEEP * 20:
                assert failure_event(raw) is False
        lines = [rec.getMessage() for rec in caplog.records]
        assert len(lines) <= 1  # none if an earlier test of this process logged it already
        assert all("not readable JSON" in line for line in lines)


class IngestCommandTests:
    def test_deep_json_published_leaves_the_command_running_and_indexing(
        self, r: redis.Redis, stream: str, prefix: str, redis_url: str, tmp_path: Path
    ) -> None:
        db = tmp_path / "db.sqlite3"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "dashboard.settings",
            "DJANGO_SECRET_KEY": "hostile-ingest-" + "q" * 50,
            "DJANGO_HTTPS": "0",
            "DATABASE_URL": f"sqlite:///{db}",
            "ACKBOARD_HOME": str(tmp_path),
            "VALKEY_URL": redis_url,
            "ACKBOARD_STREAMS": prefix + "*",
        }
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, timeout=120)
        add_failure(r, stream, "1-0")  # so the stream is discovered at start
        out = tmp_path / "out.log"
        with out.open("wb") as sink:
            # A poll of 10 minutes: only the failure event can wake it for the second row.
            proc = subprocess.Popen([*manage, "ingest_failures", "--poll", "600"],
                                    env=env, stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip

        def rows() -> int:
            with sqlite3.connect(db) as conn:
                found = conn.execute("SELECT COUNT(*) FROM dashboard_indexedfailure").fetchone()
            return int(found[0])

        try:
            wait_until(lambda: rows() == 1, 30, "the first record")
            wait_until(lambda: r.pubsub_numsub(EVENTS_CHANNEL)[0][1] >= 1, 30, "its subscription")
            for raw in DEEP:
                r.publish(EVENTS_CHANNEL, raw)
            add_failure(r, stream, "2-0")
            r.publish(EVENTS_CHANNEL, event_message(type="failure", stream=stream, group="g"))
            wait_until(lambda: rows() == 2 or proc.poll() is not None, 30, "the second record")
            assert proc.poll() is None, out.read_text(errors="replace")
            assert rows() == 2
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        log = out.read_text(errors="replace")
        assert proc.returncode == 0, log
        assert "Traceback" not in log
        assert log.count("not readable JSON") == 1, log
