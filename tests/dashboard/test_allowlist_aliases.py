"""The allowlist cannot be walked around through an alias.

Stream ``X`` and stream ``{X}`` used to share ``{X}:dlq``: with ``ACKBOARD_STREAMS``
admitting ``{X}*`` but not ``X``, the dead-letter page of ``{X}`` showed, deleted and
purged ``X``'s dead letters, and ``{X}:dlq`` itself opened as a stream.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.models import AuditEvent
from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.factories import add_entries, make_pending
from tests.html import element_text

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(settings: SettingsWrapper, redis_url: str, r: redis.Redis, prefix: str) -> dict[str, Any]:
    """Hidden stream ``X`` with one dead letter; visible stream ``{X}``, allowlist ``{X}*``."""
    hidden = prefix + "jobs"
    braced = "{" + hidden + "}"
    (entry_id,) = make_pending(r, hidden, "g", "c", 1)
    moved = entry_dead_letter(client=r, stream=hidden, group="g", entry_id=entry_id, reason="x")
    assert moved is not None
    add_entries(r, braced, 1)
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (braced + "*",)
    return {"hidden": hidden, "braced": braced, "dlq_id": moved.dlq_id, "origin": entry_id}


@pytest.fixture
def operator(client: Client, django_user_model: type[User]) -> Client:
    user = django_user_model.objects.create_user("olga", password="pw")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="dashboard"))
    client.force_login(user)
    return client


def _hidden_dlq(r: redis.Redis, world: dict[str, Any]) -> list[str]:
    return [i.decode() for i, _ in r.xrange(stream_keys(world["hidden"]).dlq)]


class AliasTests:
    def test_dead_letter_page_of_the_braced_stream_shows_none_of_the_hidden_ones(
        self, operator: Client, r: redis.Redis, world: dict[str, Any]
    ) -> None:
        response = operator.get(reverse("dashboard:dlq", args=[world["braced"]]))
        assert response.status_code == 200
        assert response.context["rows"] == []
        assert response.context["page"].length == 0
        table = element_text(response.content.decode(), "dlq-table")
        assert world["origin"] not in table and world["dlq_id"] not in table

    def test_delete_and_purge_on_the_braced_stream_leave_the_hidden_dlq_alone(
        self, operator: Client, r: redis.Redis, world: dict[str, Any]
    ) -> None:
        braced, dlq_id = world["braced"], world["dlq_id"]
        delete = reverse("dashboard:dlq-action", args=[braced, dlq_id, "delete"])
        assert operator.post(delete).status_code == 404
        replay = reverse("dashboard:dlq-action", args=[braced, dlq_id, "replay"])
        assert operator.post(replay).status_code == 404
        purge = reverse("dashboard:dlq-purge", args=[braced])
        response = operator.post(purge, {"confirm_name": braced, "expected_length": "1"})
        assert response.status_code == 409  # "{X}"'s own DLQ is empty: changed since…
        assert _hidden_dlq(r, world) == [dlq_id]
        assert AuditEvent.objects.filter(result="ok").count() == 0

    def test_the_hidden_streams_companions_do_not_open_as_streams(
        self, operator: Client, r: redis.Redis, world: dict[str, Any]
    ) -> None:
        keys = stream_keys(world["hidden"])  # "{X}:dlq" and "{X}:failures" match "{X}*"
        dlq_id = world["dlq_id"]
        for name in (keys.dlq, keys.failures):
            for url in (
                reverse("dashboard:stream-detail", args=[name]),
                reverse("dashboard:dlq", args=[name]),
                reverse("dashboard:entry-detail", args=[name, dlq_id]),
            ):
                assert operator.get(url).status_code == 404, url
            for url in (
                reverse("dashboard:dlq-purge", args=[name]),
                reverse("dashboard:entry-action", args=[name, "g", dlq_id, "acknowledge"]),
            ):
                assert operator.post(url, {"reason": "r", "confirm_name": name}).status_code == 404
        overview = operator.get(reverse("dashboard:overview"))
        assert [row.name for row in overview.context["rows"]] == [world["braced"]]
        assert _hidden_dlq(r, world) == [dlq_id]
