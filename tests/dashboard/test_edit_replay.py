"""Edit & replay: the permission apart from Replay, the editor, the new entry's
fields, the audit row's diff, and the dead letter kept until its replay is acknowledged."""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse

from dashboard.access.api_tokens import token_issue
from dashboard.models import AuditEvent
from queue_core.edited_replays import (
    edited_replays_settle,
    edited_replays_sweep,
    edited_replays_sweeper,
)
from queue_core.keys import (
    DLQ_EDITS_INDEX_KEY,
    REPLAY_GROUP_FIELD,
    REPLAY_OF_FIELD,
    stream_keys,
)
from queue_core.scripts.edit_replay import EDITED_FIELD, EDITED_FROM_FIELD
from queue_core.services import entry_dead_letter
from tests.dashboard.action_helpers import MakeClient
from tests.dashboard.conftest import ALL_ACTIONS
from tests.dashboard.test_cli import ackboard
from tests.html import element_text
from tests.queue_core.worker.helpers import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]

EDITOR = (*ALL_ACTIONS, "edit_replay_dead_letter")
ORIGINAL_JSON = '{"customer": {"id": "c-1"},  "amount": 5}'


def dead_letter(
    r: redis.Redis, stream: str, fields: dict[str, Any] | None = None
) -> tuple[str, str]:
    """One entry of group g dead-lettered: (origin id, dlq id)."""
    with contextlib.suppress(redis.ResponseError):
        r.xgroup_create(stream, "g", id="0", mkstream=True)
    origin = r.xadd(stream, fields or {"payload": ORIGINAL_JSON, "note": "poison"}).decode()
    r.xreadgroup("g", "c1", {stream: ">"})
    moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=origin, reason="boom")
    assert moved is not None
    return origin, moved.dlq_id


def edit_url(stream: str, dlq_id: str) -> str:
    return reverse("dashboard:dlq-edit", args=[stream, dlq_id])


def post_url(stream: str, dlq_id: str) -> str:
    return reverse("dashboard:dlq-edit-replay", args=[stream, dlq_id])


def rows(*items: tuple[str, str, str, str], **extra: str) -> dict[str, Any]:
    """The editor's POST: (orig, name, value, mode) per row."""
    return {
        "field_orig": [i[0] for i in items],
        "field_name": [i[1] for i in items],
        "field_value": [i[2] for i in items],
        "field_mode": [i[3] for i in items],
        **extra,
    }


def new_entry(r: redis.Redis, stream: str, new_id: str) -> dict[bytes, bytes]:
    found: Any = r.xrange(stream, min=new_id, max=new_id)
    [(_, fields)] = found
    return dict(fields)


@pytest.mark.usefixtures("migration_data")
class PermissionTests:
    def test_granted_to_no_role(self) -> None:
        perm = Permission.objects.get(codename="edit_replay_dead_letter")
        assert not Group.objects.filter(permissions=perm).exists()
        assert (
            Group.objects.get(name="Ackboard operators")
            .permissions.filter(codename="replay_entry")
            .exists()
        )

    def test_replay_without_edit_is_403_and_audited(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        client = make_client("olga", *ALL_ACTIONS)
        assert client.get(edit_url(stream, dlq_id)).status_code == 403
        length = r.xlen(stream)
        response = client.post(post_url(stream, dlq_id), rows(("0", "payload", "{}", "json")))
        assert response.status_code == 403
        assert r.xlen(stream) == length
        assert r.xlen(stream_keys(stream).dlq) == 1
        event = AuditEvent.objects.get(action="edit-replay")
        assert event.result == "refused"
        assert event.group == "g"
        assert event.entry_ids == [dlq_id]
        assert not r.exists(stream_keys(stream).dlq_edits)

    def test_editor_button_only_with_the_permission(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        dlq_page = reverse("dashboard:dlq", args=[stream])
        assert edit_url(stream, dlq_id) not in make_client("olga").get(dlq_page).content.decode()
        page = make_client("eddie", *EDITOR).get(dlq_page).content.decode()
        assert f'href="{edit_url(stream, dlq_id)}"' in page


class EditReplayTests:
    def test_new_entry_diff_and_dead_letter_kept(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        origin, dlq_id = dead_letter(r, stream)
        client = make_client("eddie", *EDITOR)
        editor = client.get(edit_url(stream, dlq_id))
        assert editor.status_code == 200
        body = editor.content.decode()
        # Pretty-printed JSON in its textarea (escaped).
        assert "&quot;customer&quot;: {\n    &quot;id&quot;: &quot;c-1&quot;" in body
        response = client.post(
            post_url(stream, dlq_id),
            rows(
                ("0", "payload", '{"customer": {"id": "c-2"}, "amount": 5}', "json"),
                ("", "fixed", "yes\r\nreally", "text"),
                reason="customer id typo",
            ),
        )
        assert response.status_code == 303, response.content
        event = AuditEvent.objects.get(action="edit-replay")
        assert event.result == "ok" and event.reason == "customer id typo"
        [new_id] = event.new_ids
        fields = new_entry(r, stream, new_id)
        assert fields[b"payload"] == b'{"customer":{"id":"c-2"},"amount":5}'
        assert fields[b"fixed"] == b"yes\nreally"
        assert b"note" not in fields
        assert fields[REPLAY_GROUP_FIELD.encode()] == b"g"
        assert fields[REPLAY_OF_FIELD.encode()] == origin.encode()
        assert fields[EDITED_FIELD.encode()] == b"1"
        assert fields[EDITED_FROM_FIELD.encode()] == dlq_id.encode()
        # The original is kept, whole, until the replay succeeds.
        assert len(r.xrange(stream_keys(stream).dlq, min=dlq_id, max=dlq_id)) == 1
        diff = event.state_before["diff"]
        assert diff["changed"] == {
            "payload": {
                "before": ORIGINAL_JSON,
                "after": '{"customer":{"id":"c-2"},"amount":5}',
            }
        }
        assert diff["added"] == {"fixed": "yes\nreally"}
        assert diff["removed"] == {"note": "poison"}
        assert event.state_before["origin_id"] == origin

    def test_unchanged_values_keep_their_exact_bytes(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        pretty = json.dumps(json.loads(ORIGINAL_JSON), indent=2)
        response = make_client("eddie", *EDITOR).post(
            post_url(stream, dlq_id),
            rows(("0", "payload", pretty, "json"), ("1", "note", "poison", "text")),
        )
        assert response.status_code == 303
        [new_id] = AuditEvent.objects.get(action="edit-replay").new_ids
        fields = new_entry(r, stream, new_id)
        assert fields[b"payload"] == ORIGINAL_JSON.encode()
        assert fields[b"note"] == b"poison"
        diff = AuditEvent.objects.get(action="edit-replay").state_before["diff"]
        assert diff["changed"] == {} and sorted(diff["unchanged"]) == ["note", "payload"]

    def test_settled_once_the_group_acknowledges(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        client = make_client("eddie", *EDITOR)
        client.post(post_url(stream, dlq_id), rows(("0", "payload", "{}", "json")))
        [new_id] = AuditEvent.objects.get(action="edit-replay").new_ids
        dlq_page = reverse("dashboard:dlq", args=[stream])
        page = client.get(dlq_page).content.decode()
        assert element_text(page, f"dlq-{dlq_id}").count(f"replayed as {new_id}, awaiting success")
        # Delivered but not acknowledged: still awaiting.
        r.xreadgroup("g", "c1", {stream: ">"})
        assert edited_replays_settle(r, stream) == 0
        assert r.xlen(stream_keys(stream).dlq) == 1
        r.xack(stream, "g", new_id)
        page = client.get(dlq_page).content.decode()  # a read never writes
        assert r.xlen(stream_keys(stream).dlq) == 1 and f"dlq-{dlq_id}" in page
        assert edited_replays_settle(r, stream) == 1  # what run_jobs's sweeper calls
        assert f"dlq-{dlq_id}" not in client.get(dlq_page).content.decode()
        assert r.xlen(stream_keys(stream).dlq) == 0
        assert not r.exists(stream_keys(stream).dlq_edits)

    def test_failed_again_keeps_the_original_and_allows_a_new_edit(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        client = make_client("eddie", *EDITOR)
        client.post(post_url(stream, dlq_id), rows(("0", "payload", "[1]", "json")))
        [new_id] = AuditEvent.objects.get(action="edit-replay").new_ids
        r.xreadgroup("g", "c1", {stream: ">"})
        again = entry_dead_letter(client=r, stream=stream, group="g", entry_id=new_id, reason="x")
        assert again is not None
        assert edited_replays_settle(r, stream) == 1
        assert len(r.xrange(stream_keys(stream).dlq, min=dlq_id, max=dlq_id)) == 1
        state = json.loads(r.hget(stream_keys(stream).dlq_edits, dlq_id) or b"{}")
        assert state["state"] == "failed" and state["failed_as"] == again.dlq_id
        page = client.get(reverse("dashboard:dlq", args=[stream])).content.decode()
        assert "failed again" in element_text(page, f"dlq-{dlq_id}")
        response = client.post(post_url(stream, dlq_id), rows(("0", "payload", "[2]", "json")))
        assert response.status_code == 303  # no force needed after a failure

    def test_second_replay_while_awaiting_is_409_unless_forced(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        client = make_client("eddie", *EDITOR)
        form = rows(("0", "payload", "{}", "json"))
        assert client.post(post_url(stream, dlq_id), form).status_code == 303
        length = r.xlen(stream)
        second = client.post(post_url(stream, dlq_id), form)
        assert second.status_code == 409
        assert "awaits success" in second.content.decode()
        assert r.xlen(stream) == length
        forced = client.post(post_url(stream, dlq_id), {**form, "force": "1"})
        assert forced.status_code == 303
        assert r.xlen(stream) == length + 1
        results = list(
            AuditEvent.objects.filter(action="edit-replay").values_list("result", flat=True)
        )
        assert sorted(results) == ["ok", "ok", "refused"]


class BadInputTests:
    @pytest.mark.parametrize(
        ("form", "says"),
        [
            (
                rows(("0", "payload", '{"a": ', "json")),
                "'payload' is not valid JSON (line 1, column 7)",
            ),
            (rows(("0", "ackboard.replay-group", "x", "text")), "reserved"),
            (rows(("0", "", "x", "text")), "has no name"),
            (rows(("0", "a", "x", "text"), ("1", "a", "y", "text")), "appears twice"),
            (rows(("7", "a", "x", "text")), "not one of the dead letter's fields"),
            (rows(("", "a", "x", "keep")), "only an existing field"),
            (rows(("0", "a", "x", "sql")), "unknown kind"),
            ({"field_orig": ["0"], "field_name": []}, "incomplete"),
            (rows(), "no field left"),
        ],
    )
    def test_clear_400_and_nothing_changed(
        self, make_client: MakeClient, r: redis.Redis, stream: str, form: dict[str, Any], says: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        length = r.xlen(stream)
        response = make_client("eddie", *EDITOR).post(post_url(stream, dlq_id), form)
        assert response.status_code == 400
        assert says in response.content.decode().replace("&#x27;", "'")
        assert r.xlen(stream) == length
        assert not r.exists(stream_keys(stream).dlq_edits)
        assert AuditEvent.objects.get(action="edit-replay").result == "refused"

    def test_unknown_dead_letter_is_404(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        dead_letter(r, stream)
        client = make_client("eddie", *EDITOR)
        assert client.get(edit_url(stream, "1-1")).status_code == 404
        response = client.post(post_url(stream, "1-1"), rows(("", "a", "b", "text")))
        assert response.status_code == 404


class HostileTests:
    def test_hostile_values_escaped_binary_and_redacted_kept(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        hostile = "</textarea><script>alert(1)</script><img src=x onerror=alert(2)>"
        _, dlq_id = dead_letter(
            r,
            stream,
            {"html": hostile, "blob": b"\xff\xfe\x00\x80", "password": "hunter2", "n": "1"},
        )
        client = make_client("eddie", *EDITOR)
        body = client.get(edit_url(stream, dlq_id)).content.decode()
        assert "<script>alert(1)" not in body
        assert "&lt;/textarea&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in body
        assert "hunter2" not in body
        # Keep the binary and the redacted fields as they are, edit the hostile one.
        response = client.post(
            post_url(stream, dlq_id),
            rows(
                ("0", "html", "<b>fixed</b>", "text"),
                ("1", "", "", "keep"),
                ("2", "", "", "keep"),
            ),
        )
        assert response.status_code == 303
        event = AuditEvent.objects.get(action="edit-replay")
        fields = new_entry(r, stream, event.new_ids[0])
        assert fields[b"blob"] == b"\xff\xfe\x00\x80"
        assert fields[b"password"] == b"hunter2"
        assert b"n" not in fields
        diff = event.state_before["diff"]
        assert "hunter2" not in json.dumps(event.state_before)
        assert diff["changed"]["html"]["before"] == hostile
        assert diff["removed"] == {"n": "1"}
        # The audit page shows the row escaped.
        audit = client.get(reverse("dashboard:audit")).content.decode()
        assert "<script>alert(1)" not in audit


class SweepTests:
    def test_sweep_settles_without_a_page_read_and_prunes_its_index(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        make_client("eddie", *EDITOR).post(
            post_url(stream, dlq_id), rows(("0", "payload", "{}", "json"))
        )
        [new_id] = AuditEvent.objects.get(action="edit-replay").new_ids
        assert r.sismember(DLQ_EDITS_INDEX_KEY, stream)
        assert edited_replays_sweep(r) == 0  # not delivered yet
        r.xreadgroup("g", "c1", {stream: ">"})
        r.xack(stream, "g", new_id)
        assert edited_replays_sweep(r) == 1
        assert r.xlen(stream_keys(stream).dlq) == 0
        assert not r.sismember(DLQ_EDITS_INDEX_KEY, stream)

    def test_run_jobs_sweeps(self, make_client: MakeClient, r: redis.Redis, stream: str) -> None:
        _, dlq_id = dead_letter(r, stream)
        make_client("eddie", *EDITOR).post(
            post_url(stream, dlq_id), rows(("0", "payload", "{}", "json"))
        )
        [new_id] = AuditEvent.objects.get(action="edit-replay").new_ids
        r.xreadgroup("g", "c1", {stream: ">"})
        r.xack(stream, "g", new_id)
        stopping = threading.Event()
        sweeper = threading.Thread(target=edited_replays_sweeper, args=(lambda: r, stopping))
        sweeper.start()
        try:
            wait_until(lambda: r.xlen(stream_keys(stream).dlq) == 0, timeout=5, what="sweep")
        finally:
            stopping.set()
            sweeper.join(timeout=5)
        assert not sweeper.is_alive()


class RemoteTests:
    """``manage.py ackboard edit-replay`` and ``POST /api/v1/actions/edit-replay``: the
    editor's path, rules and audit row, with the changes named instead of posted rows."""

    def test_the_command_line_sets_adds_drops_and_keeps(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        origin, dlq_id = dead_letter(r, stream, {"payload": ORIGINAL_JSON, "note": "poison",
                                                 "raw": b"\xff\x00kept"})  # fmt: skip
        make_client("eddie", *EDITOR)
        code, out, err = ackboard(
            "edit-replay", stream, dlq_id, "--user", "eddie",
            "--set-json", 'payload={"customer": {"id": "c-2"}, "amount": 5}',
            "--set", "fixed=yes", "--drop", "note", "--reason", "typo",
        )  # fmt: skip
        assert code == 0, err
        assert out.startswith(f"Dead-letter entry {dlq_id} replayed with edits to group g as ")
        event = AuditEvent.objects.get(action="edit-replay")
        assert (event.result, event.channel, event.username) == ("ok", "cli", "eddie")
        assert event.reason == "typo"
        fields = new_entry(r, stream, event.new_ids[0])
        assert fields[b"payload"] == b'{"customer":{"id":"c-2"},"amount":5}'
        assert fields[b"fixed"] == b"yes" and b"note" not in fields
        assert fields[b"raw"] == b"\xff\x00kept"  # kept byte for byte
        assert fields[REPLAY_OF_FIELD.encode()] == origin.encode()
        assert event.state_before["diff"]["removed"] == {"note": "poison"}
        assert len(r.xrange(stream_keys(stream).dlq, min=dlq_id, max=dlq_id)) == 1

        # A second edit while the first awaits success: refused unless forced.
        code, _, _ = ackboard("edit-replay", stream, dlq_id, "--user", "eddie")
        assert code == 1
        code, _, err = ackboard("edit-replay", stream, dlq_id, "--user", "eddie", "--force")
        assert code == 0, err

    @pytest.mark.parametrize(
        ("args", "says"),
        [
            (["--set-json", "payload={nope"], "'payload' is not valid JSON"),
            (["--drop", "missing"], "there is no field 'missing' to drop"),
            (["--set", "note=x", "--drop", "note"], "'note' is both set and dropped"),
            (["--set", "ackboard.x=1"], "are reserved"),
            (["--drop", "payload", "--drop", "note"], "no field left"),
        ],
    )
    def test_bad_changes_are_a_clear_2_and_change_nothing(
        self, make_client: MakeClient, r: redis.Redis, stream: str, args: list[str], says: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        make_client("eddie", *EDITOR)
        length = r.xlen(stream)
        code, _, err = ackboard("edit-replay", stream, dlq_id, "--user", "eddie", *args)
        assert code == 2 and says in err, err
        assert r.xlen(stream) == length
        assert AuditEvent.objects.get(action="edit-replay").result == "refused"

    def test_without_the_permission_exit_3_and_audited(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        make_client("olga")  # every action but edit & replay
        code, _, _ = ackboard("edit-replay", stream, dlq_id, "--user", "olga", "--set", "a=b")
        assert code == 3
        event = AuditEvent.objects.get(action="edit-replay")
        assert (event.result, event.group, event.channel) == ("refused", "g", "cli")
        assert "permission" in event.detail

    def test_the_api(
        self, make_client: MakeClient, r: redis.Redis, stream: str, django_user_model: Any
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        make_client("eddie", *EDITOR)
        make_client("olga")
        path = reverse("dashboard:api-edit-replay")

        def post(user: str, body: Any) -> Any:
            _, token = token_issue(user=django_user_model.objects.get(username=user), name="t")
            return Client().post(path, json.dumps(body), content_type="application/json",
                                 headers={"Authorization": f"Bearer {token}"})  # fmt: skip

        body = {"stream": stream, "id": dlq_id, "set_json": {"payload": {"amount": 6}},
                "drop": ["note"], "reason": "api fix"}  # fmt: skip
        denied = post("olga", body)
        assert denied.status_code == 403 and denied.json()["ok"] is False
        for bad in ({**body, "set": ["x"]}, {**body, "drop": "note"}, {"id": dlq_id}):
            answer = post("eddie", bad)
            assert answer.status_code == 400 and answer.json()["ok"] is False, answer.content
        done = post("eddie", body)
        assert done.status_code == 200, done.content
        payload = done.json()
        assert (payload["result"], payload["action"], payload["channel"]) == (
            "ok", "edit-replay", "api",
        )  # fmt: skip
        fields = new_entry(r, stream, payload["new_ids"][0])
        assert fields[b"payload"] == b'{"amount":6}' and b"note" not in fields
        events = list(AuditEvent.objects.filter(action="edit-replay").order_by("id"))
        # The denied attempt is audited; a body of the wrong shape is a 400 before the
        # runner, as for every API action.
        assert [e.result for e in events] == ["refused", "ok"]
        assert events[-1].channel == "api" and events[-1].reason == "api fix"
