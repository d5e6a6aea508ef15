"""Operator actions on one entry over HTTP, on real Redis: the response, the Redis state and
the audit row. Bulk is test_bulk.py."""

from __future__ import annotations

import json
import re
import time

import pytest
import redis
from django.contrib.messages import get_messages
from django.http import HttpResponseBase
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.access.permissions import ACTION_PERMISSIONS, JOB_ACTIONS
from dashboard.models import AuditEvent
from dashboard.views.actions import ACTIONS
from queue_core.keys import REPLAY_GROUP_FIELD, stream_keys
from queue_core.services import entry_dead_letter
from tests.dashboard.action_helpers import (
    HTMX,
    MakeClient,
    dlq_url,
    entry_url,
    last_audit,
    pending,
)
from tests.factories import CountingRedis, add_entries, make_pending
from tests.redis_server import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]


class RetryTests:
    def test_makes_entry_due_in_its_group_without_a_copy(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = make_client().post(
            entry_url(stream, entry_id, "retry"), {"place": "entry"}, headers=HTMX
        )
        # From the entry page: reload it, with the message carried in the session.
        assert response.status_code == 200 and response["HX-Refresh"] == "true"
        assert any("redelivered" in str(m) for m in get_messages(response.wsgi_request))
        row = pending(r, stream, entry_id)
        assert row["consumer"] == b"c1" and row["times_delivered"] == 1
        assert row["time_since_delivered"] >= 60_000
        assert r.xlen(stream) == 1
        event = last_audit()
        assert (event.action, event.result, event.username) == ("retry", "ok", "olga")
        assert event.entry_ids == [entry_id] and event.group == "g"
        assert event.state_before["consumer"] == "c1" and event.state_before["deliveries"] == 1


class ClaimTests:
    def test_claims_to_default_operator_consumer(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = make_client().post(
            entry_url(stream, entry_id, "claim"),
            {"seen_idle_ms": "0", "seen_deliveries": "1", "place": "row"},
            headers=HTMX,
        )
        assert response.status_code == 200, response.content
        row = pending(r, stream, entry_id)
        assert row["consumer"] == b"ackboard-operator" and row["times_delivered"] == 2
        event = last_audit()
        assert event.result == "ok" and event.state_before["consumer"] == "c1"

    def test_claims_to_chosen_consumer(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = make_client().post(
            entry_url(stream, entry_id, "claim"),
            {"seen_idle_ms": "0", "consumer": "debugger"},
            headers=HTMX,
        )
        assert response.status_code == 200
        assert pending(r, stream, entry_id)["consumer"] == b"debugger"

    def test_refuses_when_a_worker_took_it_since(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        # What the operator saw: delivered once. Then a worker reclaims it (count 2).
        r.xclaim(stream, "g", "worker-2", 0, [entry_id])
        response = make_client().post(
            entry_url(stream, entry_id, "claim"),
            {"seen_idle_ms": "0", "seen_deliveries": "1"},
            headers=HTMX,
        )
        assert response.status_code == 409
        assert response["HX-Reswap"] == "none"
        assert "changed since you looked" in response.content.decode()
        assert pending(r, stream, entry_id)["consumer"] == b"worker-2"
        event = last_audit()
        assert event.result == "refused" and "changed since you looked" in event.detail

    def test_refuses_when_the_owner_changed_since(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        # A reclaim with JUSTID keeps the count; only the owner shows the change.
        r.xclaim(stream, "g", "worker-2", 0, [entry_id], justid=True)
        response = make_client().post(
            entry_url(stream, entry_id, "claim"),
            {"seen_idle_ms": "0", "seen_deliveries": "1", "seen_consumer": "c1"},
            headers=HTMX,
        )
        assert response.status_code == 409
        assert pending(r, stream, entry_id)["consumer"] == b"worker-2"

    def test_requires_the_idle_time_seen(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = make_client()
        missing = client.post(entry_url(stream, entry_id, "claim"), headers=HTMX)
        bad = client.post(
            entry_url(stream, entry_id, "claim"), {"seen_idle_ms": "soon"}, headers=HTMX
        )
        assert missing.status_code == 400 and bad.status_code == 400
        assert pending(r, stream, entry_id)["consumer"] == b"c1"


class DeadLetterTests:
    def test_moves_entry_with_operator_and_reason(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = make_client().post(
            entry_url(stream, entry_id, "dead-letter"),
            {"reason": "poison pill", "place": "row"},
            headers=HTMX,
        )
        assert response.status_code == 200
        body = response.content.decode()
        # The row is swapped with nothing (removed); only the out-of-band message remains.
        assert body.lstrip().startswith('<div id="messages"') and 'hx-swap-oob="innerHTML"' in body
        # By the row's id: the page's forms are shared by all rows, outside the table.
        target = f"#pending-{entry_id}"
        assert (response["HX-Retarget"], response["HX-Reswap"]) == (target, "outerHTML")
        assert pending(r, stream, entry_id) is None
        [(dlq_id, fields)] = r.xrange(stream_keys(stream).dlq)
        assert fields[b"ackboard.operator"] == b"olga"
        assert fields[b"ackboard.reason"] == b"poison pill"
        event = last_audit()
        assert event.result == "ok" and event.new_ids == [dlq_id.decode()]
        assert event.reason == "poison pill"

    def test_an_entry_too_wide_to_copy_is_a_409_that_says_why(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        # Lua's unpack() limit: a certain refusal, not a 503 "may or may not have run".
        [narrow] = make_pending(r, stream, "g", "c1", 1)
        wide = r.xadd(stream, {f"f{i}": "v" for i in range(4_000)}).decode()
        r.xreadgroup("g", "c1", {stream: ">"}, count=1)
        response = make_client().post(
            entry_url(stream, wide, "dead-letter"), {"reason": "poison"}, headers=HTMX
        )
        assert response.status_code == 409
        body = response.content.decode()
        assert f"entry {wide} has 4000 fields" in body and "Acknowledge it" in body
        assert pending(r, stream, wide) is not None and pending(r, stream, narrow) is not None
        assert r.exists(stream_keys(stream).dlq) == 0
        event = last_audit()
        assert (event.action, event.result, event.entry_ids) == ("dead-letter", "refused", [wide])
        assert "4000 fields" in event.detail

    def test_replay_of_a_dead_letter_too_wide_to_copy_is_a_409(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        fields = {f"f{i}": "v" for i in range(4_000)}
        fields |= {"ackboard.origin-group": "g", "ackboard.origin-id": "1-0"}
        dlq_id = r.xadd(stream_keys(stream).dlq, fields).decode()
        response = make_client().post(dlq_url(stream, dlq_id, "replay"), headers=HTMX)
        assert response.status_code == 409
        assert "has 4000 fields" in response.content.decode()
        assert r.xlen(stream_keys(stream).dlq) == 1 and r.xlen(stream) == 1
        assert last_audit().result == "refused"

    def test_two_operators_leave_one_copy_and_one_refusal(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        first, second = make_client("ann"), make_client("ben")
        url = entry_url(stream, entry_id, "dead-letter")
        a = first.post(url, {"reason": "x"}, headers=HTMX)
        b = second.post(url, {"reason": "x"}, headers=HTMX)
        assert (a.status_code, b.status_code) == (200, 409)
        assert "no longer pending" in b.content.decode()
        assert r.xlen(stream_keys(stream).dlq) == 1
        results = dict(AuditEvent.objects.values_list("username", "result"))
        assert results == {"ann": "ok", "ben": "refused"}

    def test_plain_post_redirects_with_a_message(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = make_client()
        response = client.post(
            entry_url(stream, entry_id, "dead-letter"), {"next": "/somewhere/?page=2"}
        )
        assert response.status_code == 303 and response["Location"] == "/somewhere/?page=2"
        assert r.xlen(stream_keys(stream).dlq) == 1
        stored = list(get_messages(response.wsgi_request))
        assert any("dead-letter stream" in str(m) for m in stored)

    def test_plain_post_ignores_offsite_next(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = make_client().post(
            entry_url(stream, entry_id, "dead-letter"), {"next": "https://evil.example/"}
        )
        assert response.status_code == 303
        assert "evil.example" not in response["Location"]


class AcknowledgeTests:
    def test_requires_a_reason(self, r: redis.Redis, stream: str, make_client: MakeClient) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = make_client().post(
            entry_url(stream, entry_id, "acknowledge"), {"reason": "  "}, headers=HTMX
        )
        assert response.status_code == 400
        assert "needs a reason" in response.content.decode()
        assert pending(r, stream, entry_id) is not None
        assert last_audit().result == "refused"

    def test_discards_with_reason(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = make_client().post(
            entry_url(stream, entry_id, "acknowledge"),
            {"reason": "duplicate order"},
            headers=HTMX,
        )
        assert response.status_code == 200
        assert pending(r, stream, entry_id) is None
        assert r.xlen(stream) == 1  # acknowledged, not deleted from the stream
        event = last_audit()
        assert (event.result, event.reason) == ("ok", "duplicate order")
        assert event.state_before["pending"] is True

    def test_second_acknowledge_is_refused_no_op(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = make_client()
        url = entry_url(stream, entry_id, "acknowledge")
        client.post(url, {"reason": "dup"}, headers=HTMX)
        again = client.post(url, {"reason": "dup"}, headers=HTMX)
        assert again.status_code == 409
        assert "no longer pending" in again.content.decode()


def _dead_lettered(r: redis.Redis, stream: str, groups: tuple[str, ...] = ("g",)) -> str:
    [entry_id] = make_pending(r, stream, groups[0], "c1", 1)
    for other in groups[1:]:
        r.xgroup_create(stream, other, id="$")
    moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="x")
    assert moved is not None
    return moved.dlq_id


class ReplayTests:
    def test_replays_for_its_group_only(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        dlq_id = _dead_lettered(r, stream, ("g", "other"))
        response = make_client().post(
            dlq_url(stream, dlq_id, "replay"), {"place": "dlq-row"}, headers=HTMX
        )
        assert response.status_code == 200, response.content
        assert r.xlen(stream_keys(stream).dlq) == 0
        new_id, fields = r.xrange(stream, min="(" + "0-1")[-1]
        assert fields[REPLAY_GROUP_FIELD.encode()] == b"g"
        event = last_audit()
        assert event.action == "replay" and event.new_ids == [new_id.decode()]
        assert event.entry_ids == [dlq_id] and event.group == "g"

    def test_unknown_dlq_id_is_404(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        _dead_lettered(r, stream)
        response = make_client().post(dlq_url(stream, "1-1", "replay"), headers=HTMX)
        assert response.status_code == 404
        assert r.xlen(stream_keys(stream).dlq) == 1


class DeleteTests:
    def test_deletes_one_dead_lettered_entry(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        dlq_id = _dead_lettered(r, stream)
        response = make_client().post(dlq_url(stream, dlq_id, "delete"), headers=HTMX)
        assert response.status_code == 200
        assert r.xlen(stream_keys(stream).dlq) == 0
        event = last_audit()
        assert (event.action, event.result) == ("delete", "ok")
        assert event.state_before["origin_id"]


class PurgeTests:
    def _post(self, client: Client, stream: str, **data: str) -> HttpResponseBase:
        return client.post(reverse("dashboard:dlq-purge", args=[stream]), data, headers=HTMX)

    def test_needs_the_typed_stream_name(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        _dead_lettered(r, stream)
        response = self._post(make_client(), stream, confirm_name="nope", expected_length="1")
        assert response.status_code == 400
        assert r.xlen(stream_keys(stream).dlq) == 1

    def test_purges_what_was_seen(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        dlq_id = _dead_lettered(r, stream)
        response = self._post(
            make_client(), stream, confirm_name=stream, expected_length="1", newest_id=dlq_id
        )
        assert response.status_code == 200
        assert r.exists(stream_keys(stream).dlq) == 0
        event = last_audit()
        assert (event.action, event.result) == ("purge", "ok")
        assert event.state_before["deleted"] == 1

    def test_refuses_when_more_arrived(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        _dead_lettered(r, stream)
        response = self._post(make_client(), stream, confirm_name=stream, expected_length="0")
        assert response.status_code == 409
        assert r.xlen(stream_keys(stream).dlq) == 1


class BadInputTests:
    def test_malformed_entry_id_is_400(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        client = make_client()
        group_page = reverse("dashboard:group-detail", args=[stream, "g"])
        for bad in ("abc", "1-", "-1", "1-0-0", "99999999999999999999999-0"):
            # Typed by hand: reverse() makes links only to ids the page accepts.
            response = client.post(f"{group_page}entries/{bad}/retry/", headers=HTMX)
            assert response.status_code == 400, bad

    def test_unknown_entry_group_stream_and_action_are_404(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = make_client()
        assert client.post(entry_url(stream, "1-1", "retry"), headers=HTMX).status_code == 404
        assert (
            client.post(entry_url(stream, entry_id, "retry", group="nope"), headers=HTMX)
        ).status_code == 404
        assert (
            client.post(entry_url(stream + "x", entry_id, "retry"), headers=HTMX)
        ).status_code == 404
        assert client.post(entry_url(stream, entry_id, "explode")).status_code == 404
        assert pending(r, stream, entry_id)["consumer"] == b"c1"

    def test_stream_outside_allowlist_is_404(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: SettingsWrapper
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        settings.ACKBOARD_STREAMS = ("other-*",)
        response = make_client().post(entry_url(stream, entry_id, "dead-letter"), headers=HTMX)
        assert response.status_code == 404
        assert r.xlen(stream_keys(stream).dlq) == 0

    def test_get_is_not_allowed(self, r: redis.Redis, stream: str, make_client: MakeClient) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        assert make_client().get(entry_url(stream, entry_id, "retry")).status_code == 405


class RedisDownTests:
    def test_action_reports_error_changes_nothing_and_audits(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: SettingsWrapper
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        response = make_client().post(entry_url(stream, entry_id, "dead-letter"), headers=HTMX)
        assert response.status_code == 503
        # A failed write cannot promise it did not run (a timeout may follow the change).
        assert "may or may not have run" in response.content.decode()
        assert pending(r, stream, entry_id) is not None
        event = last_audit()
        assert event.result == "error" and "ConnectionError" in event.detail


class NotPendingButPresentTests:
    def test_retry_of_an_acked_entry_is_refused(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        r.xack(stream, "g", entry_id)
        response = make_client().post(entry_url(stream, entry_id, "retry"), headers=HTMX)
        assert response.status_code == 409
        assert last_audit().state_before == {"pending": False}

    def test_add_entries_are_not_pending(self, r: redis.Redis, stream: str) -> None:
        # Guards the factory the tests above rely on: XADD alone delivers nothing.
        make_pending(r, stream, "g", "c1", 1)
        [fresh] = add_entries(r, stream, 1)
        assert pending(r, stream, fresh) is None


def _buttons(html: str) -> set[str]:
    return set(re.findall(r"<button[^>]*>\s*([^<]+?)\s*</button>", html))


class ButtonsTests:
    def test_operator_sees_labelled_buttons_on_pending_rows(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        html = make_client().get(reverse("dashboard:group-detail", args=[stream, "g"]))
        body = html.content.decode()
        assert {"Retry", "Claim", "Dead-letter", "Acknowledge"} <= _buttons(body)
        assert f'formaction="{entry_url(stream, entry_id, "retry")}"' in body
        # The shared Claim dialog posts what the row shows (row_actions.js fills it in).
        assert 'name="seen_idle_ms"' in body and 'name="seen_deliveries"' in body
        assert 'data-deliveries="1"' in body and 'data-row-dialog="claim"' in body
        assert 'id="bulk-form"' in body and 'name="snapshot_id"' in body

    def test_reader_sees_no_action_buttons(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        reader = make_client("reader", "view_queues")
        body = reader.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
        assert f'<tr id="pending-{entry_id}"' in body  # the row is there …
        assert not {"Retry", "Claim", "Dead-letter", "Acknowledge"} & _buttons(body)  # … no buttons
        assert 'id="bulk-form"' not in body
        entry = reader.get(reverse("dashboard:entry-detail", args=[stream, entry_id]))
        assert not {"Retry", "Claim", "Dead-letter", "Acknowledge"} & _buttons(
            entry.content.decode()
        )

    def test_only_permitted_buttons_show(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        retrier = make_client("retrier", "view_queues", "retry_entry")
        body = retrier.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
        assert "Retry" in _buttons(body)
        assert not {"Claim", "Dead-letter", "Acknowledge"} & _buttons(body)

    def test_dlq_page_has_replay_delete_and_purge(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        dlq_id = _dead_lettered(r, stream)
        body = make_client().get(reverse("dashboard:dlq", args=[stream])).content.decode()
        assert {"Replay", "Delete", "Purge"} <= _buttons(body)
        assert dlq_url(stream, dlq_id, "replay") in body
        assert 'name="expected_length" value="1"' in body
        assert f'name="newest_id" value="{dlq_id}"' in body
        reader = make_client("reader", "view_queues")
        body = reader.get(reverse("dashboard:dlq", args=[stream])).content.decode()
        assert not {"Replay", "Delete", "Purge"} & _buttons(body)


class RowSwapTests:
    def test_claim_from_a_row_swaps_the_re_rendered_row(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = make_client().post(
            entry_url(stream, entry_id, "claim"),
            {"seen_idle_ms": "0", "place": "row", "consumer": "debugger"},
            headers=HTMX,
        )
        assert response.status_code == 200
        assert response["HX-Reselect"] == f"#pending-{entry_id}"
        body = response.content.decode()
        row = body.split(f'<tr id="pending-{entry_id}"', 1)[1].split("</tr>", 1)[0]
        assert "debugger" in row and ">2<" in row  # new owner, delivered twice now
        assert 'hx-swap-oob="innerHTML"' in body and "claimed by debugger" in body

    def test_retry_from_a_row_keeps_the_row(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = make_client().post(
            entry_url(stream, entry_id, "retry"), {"place": "row"}, headers=HTMX
        )
        assert response["HX-Reselect"] == f"#pending-{entry_id}"
        body = response.content.decode()
        row = body.split(f'<tr id="pending-{entry_id}"', 1)[1].split("</tr>", 1)[0]
        # The row's idle cell (written by the browser from when it was delivered): idle
        # now at least 60 s.
        [delivered] = re.findall(r'<span class="dur" data-since="(\d+)"', row)
        assert int(delivered) <= time.time() * 1000 - 59_000

    @pytest.mark.parametrize(
        ("action", "fields"),
        [("retry", {}), ("claim", {"seen_idle_ms": "0", "consumer": "debugger"})],
    )
    def test_a_swapped_row_costs_the_state_read_and_the_service_only(
        self,
        r: redis.Redis,
        redis_url: str,
        stream: str,
        make_client: MakeClient,
        monkeypatch: pytest.MonkeyPatch,
        action: str,
        fields: dict[str, str],
    ) -> None:
        """The entry is read once (XPENDING and XRANGE, pipelined); the swapped row is
        built from that read and what the service reported, not read again."""
        first, entry_id = make_pending(r, stream, "g", "c1", 2)
        client = make_client()
        # The first call loads the script; the one counted runs it by its SHA.
        client.post(entry_url(stream, first, action), {**fields, "place": "row"}, headers=HTMX)
        counting = CountingRedis(connection_pool=redis.ConnectionPool.from_url(redis_url))
        monkeypatch.setattr("dashboard.views.actions.get_redis", lambda: counting)
        response = client.post(
            entry_url(stream, entry_id, action), {**fields, "place": "row"}, headers=HTMX
        )
        assert response["HX-Reselect"] == f"#pending-{entry_id}"
        # The state read, the service's script, and its PUBLISH for live pages.
        assert counting.round_trips == 3
        row = pending(r, stream, entry_id)
        assert row is not None
        body = response.content.decode()
        cells = body.split(f'<tr id="pending-{entry_id}"', 1)[1].split("</tr>", 1)[0]
        assert row["consumer"].decode() in cells and f">{row['times_delivered']}<" in cells
        counting.close()


class EntryAuditTests:
    def test_entry_page_shows_its_audit_history(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id, other] = make_pending(r, stream, "g", "c1", 2)
        client = make_client()
        client.post(entry_url(stream, entry_id, "retry"), headers=HTMX)
        client.post(entry_url(stream, other, "acknowledge"), {"reason": "other one"}, headers=HTMX)
        body = client.get(reverse("dashboard:entry-detail", args=[stream, entry_id])).content
        text = body.decode()
        assert "Audit history" in text
        assert len(re.findall(r'<tr id="entry-audit-\d+"', text)) == 1
        assert "retry" in text and "other one" not in text


class PlainPostTests:
    def test_refusal_without_htmx_is_a_page_with_the_message(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = make_client().post(entry_url(stream, entry_id, "acknowledge"), {"reason": ""})
        assert response.status_code == 400
        body = response.content.decode()
        assert "Nothing was changed" in body and "needs a reason" in body
        assert "<html" in body
        assert pending(r, stream, entry_id) is not None


def _triggered_after_swap(response: HttpResponseBase) -> set[str]:
    """The events htmx fires after the swap (HX-Trigger-After-Swap: names or JSON)."""
    header = response.headers.get("HX-Trigger-After-Swap", "")
    if header.startswith("{"):
        return set(json.loads(header))
    return {name.strip() for name in header.split(",") if name.strip()}


class ActionTableTests:
    def test_every_action_has_a_permission_and_only_its_own_route(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        # Every permission is a row's, but a redrive's (a job, dashboard.redrive).
        assert set(ACTIONS) == set(ACTION_PERMISSIONS) - JOB_ACTIONS
        assert {row.name: row.permission for row in ACTIONS.values()} == {
            name: perm for name, perm in ACTION_PERMISSIONS.items() if name not in JOB_ACTIONS
        }
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        dlq_id = _dead_lettered(r, stream)
        client = make_client()
        for name in ("replay", "delete", "purge"):  # not actions on a pending entry
            assert client.post(entry_url(stream, entry_id, name), headers=HTMX).status_code == 404
        for name in ("retry", "claim", "dead-letter", "acknowledge", "purge"):
            assert client.post(dlq_url(stream, dlq_id, name), headers=HTMX).status_code == 404
        assert r.xlen(stream_keys(stream).dlq) == 1
        assert not AuditEvent.objects.exists()

    def test_answers_have_live_updates_rechecked_after_the_swap(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 3)
        client = make_client()
        kept = client.post(entry_url(stream, ids[0], "retry"), {"place": "row"}, headers=HTMX)
        removed = client.post(
            entry_url(stream, ids[1], "acknowledge"), {"reason": "x"}, headers=HTMX
        )
        refused = client.post(entry_url(stream, ids[2], "acknowledge"), headers=HTMX)
        assert [a.status_code for a in (kept, removed, refused)] == [200, 200, 400]
        for answer in (kept, removed, refused):
            assert _triggered_after_swap(answer) == {"change"}


class FormOrderTests:
    def test_the_form_is_checked_after_the_state_is_read(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = make_client()
        # Two problems: the first declared (the consumer) is the one reported.
        response = client.post(
            entry_url(stream, entry_id, "claim"), {"consumer": "x" * 300}, headers=HTMX
        )
        assert response.status_code == 400
        assert "consumer name is longer than 255 characters" in response.content.decode()
        event = last_audit()
        assert (event.result, event.state_before["consumer"]) == ("refused", "c1")
        # An unknown group is a 404 before the form is looked at.
        unknown = client.post(entry_url(stream, entry_id, "claim", group="nope"), headers=HTMX)
        assert unknown.status_code == 404
        assert pending(r, stream, entry_id)["consumer"] == b"c1"

    def test_reason_is_taken_as_typed_and_cut_at_the_limit(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        reason = "  dup\\tlicate " + "x" * 3000
        response = make_client().post(
            entry_url(stream, entry_id, "acknowledge"), {"reason": reason}, headers=HTMX
        )
        assert response.status_code == 200
        assert last_audit().reason == reason.strip()[:2000]
        assert pending(r, stream, entry_id) is None


class DeadLetterAuditTests:
    def test_delete_audits_the_origin_the_script_wrote(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        dlq_id = _dead_lettered(r, stream)
        [(_, fields)] = r.xrange(stream_keys(stream).dlq)
        make_client().post(dlq_url(stream, dlq_id, "delete"), headers=HTMX)
        assert last_audit().state_before == {
            "origin_group": "g",
            "origin_id": fields[b"ackboard.origin-id"].decode(),
            "consumer": "c1",
            "deliveries": "1",
            "reason": "x",
            "operator": "",
        }
