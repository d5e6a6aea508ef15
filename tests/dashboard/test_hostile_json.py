"""Hostile JSON at every dashboard entry point, on real Redis: a 4xx or a page, never a 500.

Entry points and inputs (hypothesis ``max_examples``): every ``/api/v1/`` POST route
(the 15 actions and 3 bulk actions, a route drawn per input, with a bearer token: 100),
the payload search's query parameters and the payloads it reads (100), the group page
with a hostile pause key and heartbeat (60), the editor's JSON fields (60); and the
issue's cases, deterministically, on every route.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any
from urllib.parse import urlencode

import pytest
import redis
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.access.api_tokens import token_issue
from dashboard.views.action_runner import BadRequest
from dashboard.views.actions import ACTIONS
from dashboard.views.bulk import BULK_ACTIONS
from dashboard.views.edit_replay import edited_fields
from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.dashboard.action_helpers import MakeClient
from tests.dashboard.remote_helpers import World
from tests.factories import make_pending
from tests.hostile_json import hostile_json
from tests.html import attribute_text, element_text

pytestmark = pytest.mark.django_db

FIXTURES = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
#: What a hostile request may get: never a 500.
FINE = {200, 400, 401, 403, 404, 405, 409}
ROUTES = [reverse("dashboard:api-action", args=[a]) for a in ACTIONS] + [
    reverse("dashboard:api-bulk", args=[a]) for a in BULK_ACTIONS
]
#: The issue's probes: 1,000 nested arrays (500 gave 400 already) and worse.
DEEP = ["[" * 1000 + "]" * 1000, '{"stream": "s", "reason": ' + "[" * 100_000, "{" * 5000]


def bearer(user: Any) -> dict[str, str]:
    _, token = token_issue(user=user, name="hostile")
    return {"Authorization": f"Bearer {token}"}


def api_post(path: str, body: str, headers: dict[str, str]) -> Any:
    client = Client(raise_request_exception=False)
    return client.post(path, body, content_type="application/json", headers=headers)


class ApiBodyTests:
    def test_the_issues_bodies_are_a_400_on_every_route(
        self, remote_world: World, django_user_model: Any
    ) -> None:
        # Every permission: a route checks it before it reads the body.
        headers = bearer(django_user_model.objects.create_superuser("root", password="pw"))
        for path in ROUTES:
            for body in DEEP:
                response = api_post(path, body, headers)
                assert response.status_code == 400, (path, response.content[:200])
                assert response.json()["message"] == (
                    "the body must be a JSON object (it is nested deeper than 64 levels)"
                )

    @FIXTURES
    @given(path=st.sampled_from(ROUTES), body=hostile_json())
    def test_hostile_bodies_are_answered_in_json_never_a_500(
        self, remote_world: World, olga: Any, path: str, body: str
    ) -> None:
        response = api_post(path, body.replace("s", remote_world.stream, 1), bearer(olga))
        assert response.status_code in FINE, (path, body[:80], response.content[:200])
        assert response["Content-Type"] == "application/json"


def find(client: Client, stream: str, **params: str) -> Any:
    url = reverse("dashboard:payload-find", args=[stream]) + "?" + urlencode(params)
    return client.get(url)


@pytest.mark.usefixtures("action_settings")
class PayloadSearchTests:
    def test_the_issues_value_is_a_400_for_a_viewer(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        r.xadd(stream, {"payload": '{"a": 1}'})
        value = "[" * 1500 + "]" * 1500
        response = find(make_client("vera", "view_queues"), stream,
                        field="payload", op="json", path="$.a", value=value)  # fmt: skip
        assert response.status_code == 400
        assert "nested deeper than 64 levels" in response.content.decode()

    @FIXTURES
    @given(
        op=st.sampled_from(["json", "contains", "equals"]),
        value=hostile_json(),
        path=st.one_of(st.just("$"), hostile_json().map(lambda t: "$[" + json.dumps(t) + "]")),
        stored=hostile_json(),
    )
    def test_hostile_parameters_and_payloads_are_a_page_or_a_400(
        self, viewer: Client, r: redis.Redis, stream: str,
        op: str, value: str, path: str, stored: str,
    ) -> None:  # fmt: skip
        r.xadd(stream, {"payload": stored})
        client = viewer
        response = find(client, stream, field="payload", op=op, path=path, value=value[:10_000])
        assert response.status_code in (200, 400), response.content[:300]
        # And a search that reaches the hostile payloads (their previews are rendered).
        response = find(client, stream, field="payload", op="contains", value="")
        assert response.status_code == 200


@pytest.mark.usefixtures("action_settings")
class GroupPageTests:
    def group_page(self, client: Client, stream: str) -> Any:
        return client.get(reverse("dashboard:group-detail", args=[stream, "g"]))

    def test_a_deep_pause_and_heartbeat_are_a_page_with_a_clear_note(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "w1", 1)
        keys = stream_keys(stream)
        r.set(keys.pause("g"), "[" * 5000 + "]" * 5000)
        r.hset(keys.workers("g"), "w1", '{"seen_ms": ' + "[" * 100_000)
        response = self.group_page(make_client("vera", "view_queues"), stream)
        assert response.status_code == 200
        body = response.content.decode()
        assert element_text(body, "group-fleet").startswith(
            "paused Paused by (unknown) ((unreadable))"
        )
        assert attribute_text(body, "data-fleet-note", "unreadable") == (
            "1 heartbeat in this group's workers key could not be read (not what an Ackboard "
            "worker writes): not shown."
        )

    @settings(
        max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(pause=hostile_json(), heartbeat=hostile_json())
    def test_hostile_control_keys_are_a_page(
        self, viewer: Client, r: redis.Redis, stream: str, pause: str, heartbeat: str
    ) -> None:
        if not r.exists(stream):
            make_pending(r, stream, "g", "w1", 1)
        keys = stream_keys(stream)
        r.set(keys.pause("g"), pause)
        r.hset(keys.workers("g"), "w1", heartbeat)
        response = self.group_page(viewer, stream)
        assert response.status_code == 200


def dead_letter(r: redis.Redis, stream: str) -> str:
    with contextlib.suppress(redis.ResponseError):
        r.xgroup_create(stream, "g", id="0", mkstream=True)
    origin = r.xadd(stream, {"payload": '{"a": 1}'}).decode()
    r.xreadgroup("g", "c1", {stream: ">"})
    moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=origin, reason="x")
    assert moved is not None
    return moved.dlq_id


class EditedFieldTests:
    @settings(max_examples=60, deadline=None)
    @given(value=hostile_json(), keep=st.booleans())
    def test_a_hostile_json_field_is_a_400_naming_it_or_its_value(
        self, value: str, keep: bool
    ) -> None:
        original = [(b"payload", value.encode())]
        data = {"field_orig": ["0" if keep else ""], "field_name": ["payload"],
                "field_value": [value], "field_mode": ["json"]}  # fmt: skip
        try:
            [(name, _)] = edited_fields(data, original)
        except BadRequest as exc:
            assert "field 'payload' is not valid JSON" in str(exc)
        else:
            assert name == b"payload"

    @pytest.mark.usefixtures("action_settings")
    def test_the_editor_posts_a_deep_field_and_gets_a_400(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        dlq_id = dead_letter(r, stream)
        client = make_client("eddie", "view_queues", "replay_entry", "edit_replay_dead_letter")
        response = client.post(
            reverse("dashboard:dlq-edit-replay", args=[stream, dlq_id]),
            {
                "field_orig": ["0"],
                "field_name": ["payload"],
                "field_value": [DEEP[0]],
                "field_mode": ["json"],
                "reason": "fix",
            },  # fmt: skip
            headers={"HX-Request": "true"},
        )
        assert response.status_code == 400
        assert "nested deeper than 64 levels" in response.content.decode()
