"""Health from Redis alone on the overview, the group page and /metrics, for a queue whose
consumers are plain redis-py XREADGROUP calls (not Ackboard's worker), on Redis 7.0,
Redis 6.2 and Valkey."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from dashboard.display.durations import human_ms
from dashboard.views import ops
from tests.health_scenario import ENGINES, STUCK_AFTER_MS, Scenario, engine, seed
from tests.html import element_text, table_rows

pytestmark = pytest.mark.django_db

#: The threshold as the pages print it.
WINDOW = human_ms(STUCK_AFTER_MS)


@pytest.fixture(scope="module", params=ENGINES)
def engine_url(request: pytest.FixtureRequest) -> Iterator[str]:
    with engine(request.param) as url:
        yield url


@pytest.fixture(scope="module")
def er(engine_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(engine_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def scenario(er: redis.Redis) -> Scenario:
    """Every state (``tests.health_scenario``), seeded once per engine: the dead consumers
    only get deader. The server is this module's own, so nothing needs deleting."""
    return seed(er, "health:")


@pytest.fixture
def viewer(
    client: Client, django_user_model: Any, settings: Any, engine_url: str, scenario: Scenario
) -> Client:
    settings.ACKBOARD_REDIS_URL = engine_url
    settings.ACKBOARD_STREAMS = ("health:*",)
    settings.ACKBOARD_STUCK_AFTER_MS = STUCK_AFTER_MS
    ops._cache = None
    user = django_user_model.objects.create_user("viewer", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="view_queues"))
    client.force_login(user)
    return client


@pytest.fixture
def s(scenario: Scenario, er: redis.Redis) -> Scenario:
    """The scenario, its live consumers having just read."""
    scenario.keep_alive(er)
    return scenario


def _overview_cells(html: str) -> dict[str, list[str]]:
    """Overview rows by stream name (the first cell)."""
    return {cells[0]: cells for cells in table_rows(html, "stream-row-").values()}


def _consumer_cells(html: str) -> dict[str, list[str]]:
    return {cells[0]: cells for cells in table_rows(html, "consumer-row-").values()}


def _group_page(viewer: Client, stream: str, group: str) -> str:
    response = viewer.get(reverse("dashboard:group-detail", args=[stream, group]))
    assert response.status_code == 200
    return str(response.content.decode())


class OverviewHealthTests:
    def test_badges_from_consumers_alone(self, viewer: Client, s: Scenario) -> None:
        troubled, fine = s.troubled, s.fine
        rows = _overview_cells(viewer.get(reverse("dashboard:overview")).content.decode())
        health = rows[troubled][1]
        # The worst state is the badge; each flagged group follows on its own line.
        assert health.startswith("no live consumer ")
        for group, state in (
            (s.abandoned, "no live consumer"),
            (s.unread, "no live consumer"),
            (s.stuck, "stuck"),
        ):
            assert f"{group}: {state}" in health
        assert s.healthy not in health and s.quiet not in health
        assert rows[fine][1] == "ok"

    def test_reasons_name_the_groups(self, viewer: Client, s: Scenario) -> None:
        troubled = s.troubled
        response = viewer.get(reverse("dashboard:overview"))
        (row,) = [r for r in response.context["rows"] if r.name == troubled]
        assert (row.health.level, row.health.label) == ("bad", "no live consumer")
        assert f"group {s.stuck}: 4 entries held by 1 consumer not seen in {WINDOW}" in (
            row.health.reasons
        )


class GroupPageHealthTests:
    def test_stuck_group_names_the_dead_consumer(self, viewer: Client, s: Scenario) -> None:
        troubled = s.troubled
        html = _group_page(viewer, troubled, s.stuck)
        health = element_text(html, "group-health")
        assert health.startswith("Health stuck ")
        assert f"4 entries held by 1 consumer not seen in {WINDOW}" in health
        assert f"1 consumer seen in {WINDOW}" in health
        consumers = _consumer_cells(html)
        assert consumers["w-dead"][1] == "4"
        assert consumers["w-dead"][-1] == "dead, holds 4"
        assert consumers["w-live"][-1] == "live"

    def test_abandoned_and_unread_groups_have_no_live_consumer(
        self, viewer: Client, s: Scenario
    ) -> None:
        troubled = s.troubled
        abandoned = _group_page(viewer, troubled, s.abandoned)
        text = element_text(abandoned, "group-health")
        assert text.startswith("Health no live consumer ")
        assert f"no consumer seen in {WINDOW} while entries wait" in text
        assert _consumer_cells(abandoned)["a-dead"][-1] == "dead, holds 3"
        unread = element_text(_group_page(viewer, troubled, s.unread), "group-health")
        assert unread.startswith("Health no live consumer ")
        assert "0 consumers seen" in unread

    def test_live_consumer_keeps_the_group_ok(self, viewer: Client, s: Scenario) -> None:
        html = _group_page(viewer, s.troubled, s.healthy)
        assert element_text(html, "group-health").startswith("Health ok ")
        assert _consumer_cells(html)["w-live"][-1] == "live"

    def test_quiet_group_is_ok_though_its_consumer_is_not_seen(
        self, viewer: Client, s: Scenario
    ) -> None:
        # Nothing waits: an idle consumer on a quiet stream is not a problem (on Redis 7.0
        # and 6.2 a live worker waiting on a quiet stream looks exactly like this).
        html = _group_page(viewer, s.fine, s.quiet)
        text = element_text(html, "group-health")
        assert text.startswith("Health ok ")
        assert f"0 consumers seen in {WINDOW}" in text
        assert _consumer_cells(html)["w-quiet"][-1] == "not seen"


class MetricsHealthTests:
    def test_gauges(self, viewer: Client, s: Scenario) -> None:
        troubled, fine = s.troubled, s.fine
        body = viewer.get(reverse("dashboard:metrics")).content.decode()
        samples = {
            (sample.name, sample.labels.get("stream"), sample.labels.get("group")): sample.value
            for family in text_string_to_metric_families(body)
            for sample in family.samples
        }

        def gauges(stream: str, group: str) -> tuple[float, ...]:
            return tuple(
                samples[(name, stream, group)]
                for name in (
                    "ackboard_group_stuck",
                    "ackboard_group_stuck_entries",
                    "ackboard_group_no_live_consumer",
                    "ackboard_group_live_consumers",
                )
            )

        assert gauges(troubled, s.stuck) == (1, 4, 0, 1)
        assert gauges(troubled, s.abandoned) == (1, 3, 1, 0)
        assert gauges(troubled, s.unread) == (0, 0, 1, 0)
        assert gauges(troubled, s.healthy) == (0, 0, 0, 1)
        assert gauges(fine, s.quiet) == (0, 0, 0, 0)
        assert samples[("ackboard_stuck_after_seconds", None, None)] == STUCK_AFTER_MS / 1000
