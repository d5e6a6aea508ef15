"""/metrics (Prometheus text, cached up to 1 s, authorised) and /healthz."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import redis
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from dashboard.views import ops
from queue_core import services
from tests.factories import make_group, make_pending
from tests.redis_server import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def ops_settings(settings: Any, redis_url: str, prefix: str) -> Any:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    ops._cache = None
    return settings


def _samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


class MetricsTests:
    def test_per_stream_and_group_figures(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c", 3)
        make_group(r, stream, "idle-group", start="$")
        services.entry_dead_letter(
            client=r, stream=stream, group="g", entry_id=ids[0], reason="x", operator="op"
        )
        response = viewer.get(reverse("dashboard:metrics"))
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain; version=0.0.4")
        samples = _samples(response.content)
        s = (("stream", stream),)
        g = (("group", "g"), ("stream", stream))
        assert samples[("ackboard_stream_length", s)] == 3
        assert samples[("ackboard_stream_dead_letter_length", s)] == 1
        assert samples[("ackboard_group_pending", g)] == 2
        assert samples[("ackboard_group_consumers", g)] == 1
        assert 0 <= samples[("ackboard_group_oldest_pending_age_seconds", g)] < 60
        idle = (("group", "idle-group"), ("stream", stream))
        assert samples[("ackboard_group_pending", idle)] == 0

    def test_cached_for_up_to_a_second(self, viewer: Client, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "c", 1)
        url = reverse("dashboard:metrics")
        first = viewer.get(url).content
        make_pending(r, stream, "g", "c", 1, create=False)
        assert viewer.get(url).content == first
        # The cached figures' TTL passes: the cache entry is made that much older.
        assert ops._cache is not None
        ops._cache = dataclasses.replace(ops._cache, at=ops._cache.at - ops._cache.ttl)
        fresh = _samples(viewer.get(url).content)
        assert fresh[("ackboard_group_pending", (("group", "g"), ("stream", stream)))] == 2

    def test_anonymous_scraper_needs_the_token(
        self, client: Client, ops_settings: Any, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "c", 1)
        url = reverse("dashboard:metrics")
        assert client.get(url).status_code == 403
        ops_settings.ACKBOARD_METRICS_TOKEN = "scrape-me"
        assert client.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 403
        response = client.get(url, headers={"Authorization": "Bearer scrape-me"})
        assert response.status_code == 200
        assert b"ackboard_group_pending" in response.content


class HealthzTests:
    def test_ok_when_redis_answers(self, client: Client, ops_settings: Any) -> None:
        response = client.get(reverse("dashboard:healthz"))
        assert response.status_code == 200
        assert response.content.startswith(b"ok")

    def test_503_when_redis_is_unreachable(self, client: Client, ops_settings: Any) -> None:
        ops_settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        ops_settings.ACKBOARD_REDIS_TIMEOUT = 0.5
        response = client.get(reverse("dashboard:healthz"))
        assert response.status_code == 503
        assert b"redis unavailable" in response.content
