"""Produce and Duplicate through the dashboard (``dashboard.views.produce``): the page,
the buttons' POSTs, ``manage.py ackboard produce|duplicate`` and the API, on the private
Redis. Each checks the answer, what Redis holds after, and the audit row."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from dashboard.access.api_tokens import token_issue
from dashboard.models import AuditEvent, StreamScope
from queue_core.keys import REPLAY_GROUP_FIELD
from queue_core.produce import MAX_FIELDS
from tests.dashboard.action_helpers import HTMX, MakeClient
from tests.dashboard.test_cli import ackboard
from tests.factories import make_user
from tests.html import element_text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("remote_settings")]

#: An operator who may read and produce (both rows' one permission).
PRODUCER = ("view_queues", "produce_entries")


def _rows(*pairs: tuple[str, str], mode: str = "text") -> dict[str, list[str]]:
    """The editor's POST for new fields ``pairs``."""
    return {
        "field_orig": ["" for _ in pairs],
        "field_name": [n for n, _ in pairs],
        "field_value": [v for _, v in pairs],
        "field_mode": [mode for _ in pairs],
    }


def _produce(client: Client, stream: str, data: dict[str, Any], **headers: str) -> Any:
    url = reverse("dashboard:stream-action", args=[stream, "produce"])
    return client.post(url, {"confirm": "1", **data}, headers=headers)


def _duplicate(client: Client, stream: str, entry_id: str, **headers: str) -> Any:
    url = reverse("dashboard:stream-entry-action", args=[stream, entry_id, "duplicate"])
    return client.post(url, {"place": "entry"}, headers=headers)


def _newest(r: redis.Redis, stream: str) -> tuple[str, dict[bytes, bytes]]:
    [(entry_id, fields)] = r.xrevrange(stream, count=1)
    return entry_id.decode(), dict(fields)


def _seed(r: redis.Redis, stream: str) -> str:
    r.xgroup_create(stream, "g", id="0", mkstream=True)
    return r.xadd(stream, {"type": "order", "payload": '{"order": 1}'}).decode()


class ProducePageTests:
    def test_the_page_and_the_stream_page_s_link_need_the_permission(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _seed(r, stream)
        page = reverse("dashboard:produce", args=[stream])
        producer, reader = make_client("pat", *PRODUCER), make_client("rita", "view_queues")
        assert producer.get(page).status_code == 200
        assert reader.get(page).status_code == 403
        stream_page = reverse("dashboard:stream-detail", args=[stream])
        assert 'id="produce-link"' in producer.get(stream_page).content.decode()
        assert 'id="produce-link"' not in reader.get(stream_page).content.decode()

    def test_a_missing_stream_s_page_is_404(self, make_client: MakeClient, stream: str) -> None:
        response = make_client("pat", *PRODUCER).get(reverse("dashboard:produce", args=[stream]))
        assert response.status_code == 404


class ProduceTests:
    def test_adds_the_entry_audits_it_and_goes_to_its_page(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _seed(r, stream)
        client = make_client("pat", *PRODUCER)
        data = {
            **_rows(("type", "order.created"), ("payload", '{\n  "order": 7\n}'), ("token", "s3")),
            "reason": "backfill",
        }
        data["field_mode"][1] = "json"
        response = _produce(client, stream, data, **HTMX)
        assert response.status_code == 200, response.content
        new_id, fields = _newest(r, stream)
        assert fields == {b"type": b"order.created", b"payload": b'{"order":7}', b"token": b"s3"}
        assert response["HX-Redirect"] == reverse("dashboard:entry-detail", args=[stream, new_id])
        event = AuditEvent.objects.get(action="produce")
        assert (event.result, event.stream, event.new_ids, event.channel) == (
            "ok", stream, [new_id], "button",
        )  # fmt: skip
        assert event.reason == "backfill"
        shown = event.state_before["fields"]
        assert shown["type"] == "order.created" and shown["payload"] == '{"order":7}'
        assert shown["token"]["redacted"] is True and "s3" not in json.dumps(shown)
        page = client.get(response["HX-Redirect"]).content.decode()
        assert f"Entry {new_id} added to {stream}" in element_text(page, "messages")

    def test_without_confirm_nothing_is_added(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _seed(r, stream)
        data = {**_rows(("a", "1")), "confirm": ""}
        response = _produce(make_client("pat", *PRODUCER), stream, data, **HTMX)
        assert response.status_code == 400 and b"confirm" in response.content
        assert r.xlen(stream) == 1

    def test_without_the_permission_403_audited(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _seed(r, stream)
        response = _produce(make_client("olga"), stream, _rows(("a", "1")), **HTMX)
        assert response.status_code == 403
        assert r.xlen(stream) == 1
        event = AuditEvent.objects.get(action="produce")
        assert (event.result, event.stream) == ("refused", stream)
        assert "permission" in event.detail

    def test_a_stream_outside_the_role_s_patterns_is_403_audited(
        self, r: redis.Redis, prefix: str, django_user_model: type[User]
    ) -> None:
        inside, outside = prefix + "orders:a", prefix + "billing:b"
        for s in (inside, outside):
            _seed(r, s)
        group = Group.objects.get_or_create(name="orders-producers")[0]
        group.permissions.add(
            *make_user(django_user_model, "tmp", *PRODUCER).user_permissions.all()
        )
        StreamScope.objects.create(group=group, pattern=prefix + "orders:*")
        user = django_user_model.objects.create_user(username="scoped", password="pw")
        user.groups.add(group)
        client = Client()
        client.force_login(user)
        assert _produce(client, inside, _rows(("a", "1")), **HTMX).status_code == 200
        assert _produce(client, outside, _rows(("a", "1")), **HTMX).status_code == 403
        assert _duplicate(client, outside, r.xrange(outside)[0][0].decode()).status_code == 403
        assert (r.xlen(inside), r.xlen(outside)) == (2, 1)
        refused = AuditEvent.objects.filter(result="refused", stream=outside)
        assert sorted(e.action for e in refused) == ["duplicate", "produce"]

    @pytest.mark.parametrize(
        ("data", "status", "says"),
        [
            ({}, 400, "no field"),
            (_rows(("<script>x</script>", "{nope")) | {"field_mode": ["json"]}, 400,
             "not valid JSON"),
            (_rows(("ackboard.replay-group", "g")), 400, "reserved"),
            (_rows(("a", "1"), ("a", "2")), 400, "appears twice"),
            (_rows(("a\x00b", "1")), 400, "NUL"),
            (_rows(("n" * 2000, "1")), 400, "too long"),
            (_rows(*((f"f{i}", "") for i in range(240))) | {"field_name": ["a"] * 240}, 400,
             "appears twice"),
            (_rows(("a", "1")) | {"field_mode": ["keep"]}, 400, "existing field"),
            (_rows(("a", "1")) | {"field_orig": ["0"]}, 400, "not one of"),
            (_rows(("a", "1")) | {"field_mode": ["<b>"]}, 400, "unknown kind"),
            ({"field_name": ["a"], "field_value": []}, 400, "incomplete"),
        ],
        ids=["none", "html-bad-json", "reserved", "twice", "nul", "long-name", "many-twice",
             "keep", "orig", "mode", "incomplete"],
    )  # fmt: skip
    def test_hostile_input_is_a_clear_4xx_and_changes_nothing(
        self,
        make_client: MakeClient,
        r: redis.Redis,
        stream: str,
        data: dict[str, Any],
        status: int,
        says: str,
    ) -> None:
        _seed(r, stream)
        response = _produce(make_client("pat", *PRODUCER), stream, data, **HTMX)
        assert response.status_code == status, response.content
        body = response.content.decode()
        assert says in body and "<script>x" not in body
        assert r.xlen(stream) == 1
        assert AuditEvent.objects.get(action="produce").result == "refused"

    def test_more_fields_than_a_request_takes_is_a_400_not_a_500(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        """Django refuses a POST of more than DATA_UPLOAD_MAX_NUMBER_FIELDS parameters
        (1,000: 250 rows of four) before the view runs; the core's bound, MAX_FIELDS, is
        what a terminal or a script meets (test_the_api)."""
        _seed(r, stream)
        client = make_client("pat", *PRODUCER)
        client.raise_request_exception = False
        rows = _rows(*((f"f{i}", "") for i in range(MAX_FIELDS + 1)))
        response = _produce(client, stream, rows, **HTMX)
        assert response.status_code == 400
        assert r.xlen(stream) == 1

    def test_a_missing_stream_is_404_and_not_created(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        response = _produce(make_client("pat", *PRODUCER), stream, _rows(("a", "1")), **HTMX)
        assert response.status_code == 404 and b"no stream" in response.content
        assert not r.exists(stream)

    def test_html_and_binary_values_are_stored_as_sent_and_shown_escaped(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _seed(r, stream)
        client = make_client("pat", *PRODUCER)
        hostile = "<img src=x onerror=alert(1)>"
        response = _produce(client, stream, _rows((hostile, hostile), ("text", "é\r\nb")))
        assert response.status_code == 303
        new_id, fields = _newest(r, stream)
        assert fields == {hostile.encode(): hostile.encode(), b"text": "é\nb".encode()}
        page = client.get(reverse("dashboard:entry-detail", args=[stream, new_id])).content
        assert hostile.encode() not in page and b"&lt;img src=x" in page


class DuplicateTests:
    def test_copies_the_entry_audits_both_ids_and_goes_to_the_copy(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _seed(r, stream)
        source = r.xadd(stream, {"blob": b"\xff\x00", REPLAY_GROUP_FIELD: "g"}).decode()
        client = make_client("pat", *PRODUCER)
        entry_page = client.get(reverse("dashboard:entry-detail", args=[stream, source]))
        assert "Duplicate" in element_text(entry_page.content.decode(), "entry-actions")
        response = _duplicate(client, stream, source, **HTMX)
        assert response.status_code == 200, response.content
        new_id, fields = _newest(r, stream)
        assert fields == {b"blob": b"\xff\x00"} and new_id != source
        assert response["HX-Redirect"] == reverse("dashboard:entry-detail", args=[stream, new_id])
        event = AuditEvent.objects.get(action="duplicate")
        assert (event.result, event.entry_ids, event.new_ids) == ("ok", [source], [new_id])
        assert event.state_before["fields"] == {"blob": {"base64": "/wA="}}
        assert event.state_before["left_out"] == 1

    def test_no_button_without_the_permission_and_403_audited(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        source = _seed(r, stream)
        client = make_client("olga")
        page = client.get(reverse("dashboard:entry-detail", args=[stream, source])).content
        assert b'id="entry-actions"' not in page or b"Duplicate" not in page
        assert _duplicate(client, stream, source, **HTMX).status_code == 403
        assert r.xlen(stream) == 1
        event = AuditEvent.objects.get(action="duplicate")
        assert (event.result, event.entry_ids) == ("refused", [source])

    def test_a_deleted_entry_is_404_and_changes_nothing(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        source = _seed(r, stream)
        r.xadd(stream, {"b": "2"})
        r.xdel(stream, source)
        response = _duplicate(make_client("pat", *PRODUCER), stream, source, **HTMX)
        assert response.status_code == 404 and b"no entry" in response.content
        assert r.xlen(stream) == 1

    @pytest.mark.parametrize("bad", ["1-", "99999999999999999999999-0", "abc"])
    def test_a_malformed_id_is_not_a_500(
        self, make_client: MakeClient, r: redis.Redis, stream: str, bad: str
    ) -> None:
        _seed(r, stream)
        url = f"/streams/{stream}/entries/{bad}/do/duplicate/"
        response = make_client("pat", *PRODUCER).post(url, headers=HTMX)
        assert 400 <= response.status_code < 500
        assert r.xlen(stream) == 1


class ProduceRemoteTests:
    """``manage.py ackboard produce|duplicate`` and the API: the same rules and audit."""

    def test_the_command_line_dry_runs_then_produces(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _seed(r, stream)
        make_client("pat", *PRODUCER)
        args = ["produce", stream, "--user", "pat", "--set", "type=x=y",
                "--set-json", 'payload={"a": [1, 2]}']  # fmt: skip
        code, out, err = ackboard(*args)
        assert code == 0 and out.startswith("Dry run: would add an entry of 2 fields"), err
        assert "--yes" in out and r.xlen(stream) == 1
        assert not AuditEvent.objects.filter(action="produce").exists()
        code, out, err = ackboard(*args, "--yes", "--reason", "by hand")
        assert code == 0, err
        new_id, fields = _newest(r, stream)
        assert out.startswith(f"Entry {new_id} added to {stream}")
        assert fields == {b"type": b"x=y", b"payload": b'{"a":[1,2]}'}
        event = AuditEvent.objects.get(action="produce")
        assert (event.channel, event.username, event.reason) == ("cli", "pat", "by hand")

    def test_the_command_line_refuses_clearly(
        self, make_client: MakeClient, r: redis.Redis, stream: str, prefix: str
    ) -> None:
        _seed(r, stream)
        make_client("pat", *PRODUCER)
        make_client("olga")
        bad_json = ackboard("produce", stream, "--user", "pat", "--set-json", "p={x", "--yes")
        assert bad_json[0] == 2 and "not valid JSON" in bad_json[2]
        missing = prefix + "typo"
        code, _, err = ackboard("produce", missing, "--user", "pat", "--set", "a=1", "--yes")
        assert code != 0 and "no stream" in err and not r.exists(missing)
        code, _, err = ackboard(
            "produce", missing, "--user", "pat", "--set", "a=1", "--yes", "--create"
        )
        assert code == 0, err
        assert r.xlen(missing) == 1
        denied = ackboard("produce", stream, "--user", "olga", "--set", "a=1", "--yes")
        assert denied[0] == 3

    def test_the_command_line_duplicates(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        source = _seed(r, stream)
        make_client("pat", *PRODUCER)
        code, out, err = ackboard("duplicate", stream, source, "--user", "pat")
        assert code == 0, err
        new_id, fields = _newest(r, stream)
        assert out.startswith(f"Entry {source} duplicated as {new_id}")
        assert fields == {b"type": b"order", b"payload": b'{"order": 1}'}
        gone = ackboard("duplicate", stream, "1-0", "--user", "pat")
        assert gone[0] != 0 and "no entry" in gone[2]
        event = AuditEvent.objects.filter(action="duplicate").order_by("id").first()
        assert event is not None and (event.channel, event.entry_ids) == ("cli", [source])

    def test_the_api(
        self, make_client: MakeClient, r: redis.Redis, stream: str, django_user_model: Any
    ) -> None:
        source = _seed(r, stream)
        make_client("pat", *PRODUCER)
        make_client("olga")

        def post(user: str, action: str, body: Any) -> Any:
            _, token = token_issue(user=django_user_model.objects.get(username=user), name="t")
            path = reverse("dashboard:api-action", args=[action])
            return Client().post(path, json.dumps(body), content_type="application/json",
                                 headers={"Authorization": f"Bearer {token}"})  # fmt: skip

        body = {"stream": stream, "set": {"type": "<b>x</b>"}, "set_json": {"n": {"a": 1}}}
        dry = post("pat", "produce", body)
        assert dry.status_code == 200 and dry.json()["dry_run"] is True, dry.content
        assert r.xlen(stream) == 1
        assert post("olga", "produce", {**body, "confirm": True}).status_code == 403
        many = {"stream": stream, "set": {f"f{i}": "" for i in range(MAX_FIELDS + 1)}}
        for bad in ({**body, "set": ["x"]}, {"set": {"a": "1"}}, {**body, "set_json": 3}, many):
            answer = post("pat", "produce", {**bad, "confirm": True})
            assert answer.status_code == 400 and answer.json()["ok"] is False, answer.content
        done = post("pat", "produce", {**body, "confirm": True, "reason": "api"})
        assert done.status_code == 200, done.content
        new_id, fields = _newest(r, stream)
        assert done.json()["new_ids"] == [new_id]
        assert fields == {b"type": b"<b>x</b>", b"n": b'{"a":1}'}
        copy = post("pat", "duplicate", {"stream": stream, "id": source})
        assert copy.status_code == 200, copy.content
        assert copy.json()["ids"] == [source] and r.xlen(stream) == 3
        assert post("pat", "duplicate", {"stream": stream, "id": "nope"}).status_code == 400
        produced = AuditEvent.objects.filter(action="produce").order_by("id")
        # The denied attempt and the one past the core's bound reached the runner (audited);
        # a body of the wrong shape is a 400 before it, as for every API action.
        assert [(e.result, e.channel) for e in produced] == [
            ("refused", "api"), ("refused", "api"), ("ok", "api"),
        ]  # fmt: skip
        assert "at most 1000 fields" in produced[1].detail
