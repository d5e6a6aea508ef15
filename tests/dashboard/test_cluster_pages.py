"""The dashboard on a 3-primary Redis Cluster: pages, actions, bulk, /metrics, the failure
ingestor and ``manage.py rename_companions``, with ``ACKBOARD_REDIS_URL`` naming one node.

Streams are picked by slot so each test's streams live on different primaries; each test
has its own key prefix on the session cluster (``redis_cluster``).
"""

from __future__ import annotations

import threading
import time

import pytest
from django.core.management import call_command
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.insight.failure_index import failures_ingest, failures_ingest_loop
from dashboard.models import AuditEvent, IndexedFailure
from dashboard.runtime.connection import get_redis
from dashboard.views import ops
from queue_core import services
from queue_core.connection import Client, ClusterClient
from queue_core.failures import FailureRecord, failures_record
from queue_core.keys import stream_keys
from tests.dashboard.action_helpers import HTMX, MakeClient, bulk_url, dlq_url, entry_url
from tests.factories import add_entries, make_pending
from tests.queue_core.test_cluster import names_on_primaries, primary_of
from tests.redis_cluster import RedisCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db


@pytest.fixture
def streams(redis_cluster: RedisCluster, cprefix: str) -> list[str]:
    names = names_on_primaries(redis_cluster, cprefix)
    assert len({primary_of(redis_cluster, n) for n in names}) == 3
    return names


@pytest.fixture
def on_cluster(settings: SettingsWrapper, cluster_url: str, cprefix: str) -> SettingsWrapper:
    settings.ACKBOARD_REDIS_URL = cluster_url
    settings.ACKBOARD_STREAMS = (cprefix + "*",)
    settings.ACKBOARD_RETRY_IDLE_MS = 60_000
    settings.ACKBOARD_OPERATOR_CONSUMER = "ackboard-operator"
    ops._cache = None
    return settings


@pytest.mark.usefixtures("on_cluster")
class PageTests:
    def test_the_dashboard_client_is_a_cluster_client(self) -> None:
        assert isinstance(get_redis(), ClusterClient)

    def test_overview_lists_streams_of_every_primary(
        self, rc: Client, streams: list[str], make_client: MakeClient
    ) -> None:
        for i, name in enumerate(streams):
            make_pending(rc, name, "g", "c", i + 1)
        response = make_client("viewer", "view_queues").get(reverse("dashboard:overview"))
        assert response.status_code == 200
        body = response.content.decode()
        assert all(name in body for name in streams)

    def test_stream_group_entry_and_dlq_pages(
        self, rc: Client, streams: list[str], make_client: MakeClient
    ) -> None:
        client = make_client("viewer", "view_queues")
        for name in streams:
            ids = make_pending(rc, name, "g", "c", 3)
            services.entry_dead_letter(client=rc, stream=name, group="g", entry_id=ids[0],
                                       reason="poison")  # fmt: skip
            pages = [
                (reverse("dashboard:stream-detail", args=[name]), ids[1]),
                (reverse("dashboard:group-detail", args=[name, "g"]), ids[2]),
                (reverse("dashboard:entry-detail", args=[name, ids[1]]), ids[1]),
                (reverse("dashboard:dlq", args=[name]), "poison"),
            ]
            for url, shown in pages:
                response = client.get(url)
                assert response.status_code == 200, (url, response.content[:300])
                assert shown in response.content.decode(), url


@pytest.mark.usefixtures("on_cluster")
class ActionTests:
    def test_every_action_on_streams_of_different_primaries(
        self, rc: Client, streams: list[str], make_client: MakeClient
    ) -> None:
        client = make_client()
        for name in streams:
            ids = make_pending(rc, name, "g", "c1", 4)
            ok = client.post(entry_url(name, ids[0], "retry"), {"place": "row"}, headers=HTMX)
            assert ok.status_code == 200, ok.content
            claim = {"seen_idle_ms": "0", "seen_deliveries": "1", "place": "row"}
            assert (
                client.post(entry_url(name, ids[1], "claim"), claim, headers=HTMX).status_code
                == 200
            )
            dead = {"reason": "poison pill", "place": "row"}
            assert (
                client.post(entry_url(name, ids[2], "dead-letter"), dead, headers=HTMX).status_code
                == 200
            )
            ack = {"reason": "duplicate"}
            assert (
                client.post(entry_url(name, ids[3], "acknowledge"), ack, headers=HTMX).status_code
                == 200
            )
            rows = {r["message_id"].decode(): r for r in rc.xpending_range(name, "g", "-", "+", 10)}
            assert set(rows) == {ids[0], ids[1]}
            assert rows[ids[1]]["consumer"] == b"ackboard-operator"
            assert rows[ids[0]]["time_since_delivered"] >= 60_000
            [(dlq_id, _)] = rc.xrange(stream_keys(name).dlq)
            replay = client.post(
                dlq_url(name, dlq_id.decode(), "replay"), {"place": "dlq-row"}, headers=HTMX
            )
            assert replay.status_code == 200, replay.content
            assert rc.xlen(name) == 5 and rc.xlen(stream_keys(name).dlq) == 0
            # Dead-letter twice more: delete one, purge the other.
            more = {"reason": "again", "place": "row"}
            for entry_id in ids[:2]:
                assert (
                    client.post(
                        entry_url(name, entry_id, "dead-letter"), more, headers=HTMX
                    ).status_code
                    == 200
                )
            first, second = (i.decode() for i, _ in rc.xrange(stream_keys(name).dlq))
            assert client.post(dlq_url(name, first, "delete"), headers=HTMX).status_code == 200
            purge = {"confirm_name": name, "expected_length": "1", "newest_id": second}
            response = client.post(reverse("dashboard:dlq-purge", args=[name]), purge, headers=HTMX)
            assert response.status_code == 200, response.content
            assert rc.exists(stream_keys(name).dlq) == 0
        actions = [e.action for e in AuditEvent.objects.order_by("id") if e.result == "ok"]
        assert actions == [
            "retry", "claim", "dead-letter", "acknowledge", "replay",
            "dead-letter", "dead-letter", "delete", "purge",
        ] * 3  # fmt: skip

    def test_bulk_retry_on_streams_of_different_primaries(
        self, rc: Client, streams: list[str], make_client: MakeClient
    ) -> None:
        client = make_client()
        for name in streams:
            ids = make_pending(rc, name, "g", "c1", 3)
            data = {"snapshot_id": ids[-1], "scope": "filter", "confirm": "1"}
            response = client.post(bulk_url(name, "retry"), data, headers=HTMX)
            assert response.status_code == 200, response.content
            rows = rc.xpending_range(name, "g", "-", "+", 10)
            assert [r["time_since_delivered"] >= 60_000 for r in rows] == [True] * 3
        assert [len(e.entry_ids) for e in AuditEvent.objects.filter(action="bulk-retry")] == [3] * 3


@pytest.mark.usefixtures("on_cluster")
class MetricsTests:
    def test_metrics_cover_streams_of_every_primary(
        self, rc: Client, streams: list[str], make_client: MakeClient
    ) -> None:
        for i, name in enumerate(streams):
            make_pending(rc, name, "g", "c", i + 1)
        response = make_client("viewer", "view_queues").get(reverse("dashboard:metrics"))
        assert response.status_code == 200
        pending = {
            s.labels["stream"]: s.value
            for family in text_string_to_metric_families(response.content.decode())
            for s in family.samples
            if s.name == "ackboard_group_pending"
        }
        assert pending == {name: i + 1 for i, name in enumerate(streams)}

    def test_healthz(self, make_client: MakeClient) -> None:
        assert make_client().get(reverse("dashboard:healthz")).status_code == 200


def _record(rc: Client, stream: str, entry_id: str) -> None:
    attempt = FailureRecord(group="g", entry_id=entry_id, consumer="w", attempt=1,
                            error_type="ValueError", message="boom")  # fmt: skip
    assert failures_record(client=rc, stream=stream, records=[attempt]) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("on_cluster")
class IngestorTests:
    def test_ingests_failure_streams_of_every_primary(self, rc: Client, streams: list[str]) -> None:
        for name in streams:
            _record(rc, name, "1-0")
        assert failures_ingest(client=get_redis(), once=True) == 3
        assert sorted(IndexedFailure.objects.values_list("stream", flat=True)) == sorted(streams)

    def test_a_failure_published_on_any_node_wakes_the_loop(
        self, rc: Client, streams: list[str]
    ) -> None:
        for name in streams:
            _record(rc, name, "1-0")  # discoverable when the loop starts
        stop = threading.Event()
        thread = threading.Thread(
            target=failures_ingest_loop,
            kwargs={"client": get_redis(), "stop": stop, "poll_s": 30.0, "rediscover_s": 60.0},
        )
        thread.start()
        try:
            wait_until(lambda: IndexedFailure.objects.count() == 3, 10, "3 rows")
            time.sleep(0.2)  # idle now: waiting for an event or its 30 s poll
            # Each stream's events are published through its own primary.
            for n, name in enumerate(streams, start=1):
                started = time.monotonic()
                _record(rc, name, "2-0")
                wait_until(lambda n=n: IndexedFailure.objects.count() == 3 + n, 5, f"{3 + n} rows")
                assert time.monotonic() - started < 5.0
        finally:
            stop.set()
            thread.join(timeout=40)
        assert not thread.is_alive()


@pytest.mark.usefixtures("on_cluster")
class RenameCompanionsTests:
    def test_renames_old_companions_on_every_primary(
        self,
        rc: Client,
        redis_cluster: RedisCluster,
        cprefix: str,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        tagged = [f"{{{name}}}orders" for name in names_on_primaries(redis_cluster, cprefix)]
        for name in tagged:
            add_entries(rc, name, 1)
            add_entries(rc, name + ":dlq", 2)  # the old layout
        call_command("rename_companions", "--apply")
        out = capsys.readouterr().out
        for name in tagged:
            assert f"renamed {name + ':dlq'!r}" in out
            assert rc.exists(name + ":dlq") == 0
            assert rc.xlen(stream_keys(name).dlq) == 2
