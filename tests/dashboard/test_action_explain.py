"""What each action does, said in the page (``ackboard_actions.EXPLAIN``, its one home);
the DLQ page's links to origin and replay-of entries; a refused replay's audit row."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis
from django.test import Client
from django.urls import reverse

from dashboard.templatetags.ackboard_actions import EXPLAIN, action_explain
from queue_core.keys import REPLAY_OF_FIELD, stream_keys
from queue_core.services import dlq_replay, entry_dead_letter
from tests.dashboard.action_helpers import HTMX, MakeClient, dlq_url, last_audit
from tests.factories import make_pending
from tests.html import element_text, labelled_text, table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]


def _group_page(client: Client, stream: str) -> str:
    url = reverse("dashboard:group-detail", args=[stream, "g"])
    return client.get(url).content.decode()


def _entry_page(client: Client, stream: str, entry_id: str) -> str:
    url = reverse("dashboard:entry-detail", args=[stream, entry_id])
    return client.get(url).content.decode()


def _first_sentence(action: str) -> str:
    """The start of an explanation, before any placeholder."""
    return EXPLAIN[action].split("{", 1)[0].strip()


def _idle(r: redis.Redis, stream: str, entry_id: str, idle_ms: int) -> None:
    r.xclaim(stream, "g", "c1", 0, [entry_id], idle=idle_ms, justid=True)


class ExplainTextTests:
    def test_every_action_has_a_line(self) -> None:
        from dashboard.views.actions import ACTIONS

        assert set(ACTIONS) <= set(EXPLAIN)

    def test_claim_says_how_long_it_holds_and_that_it_counts(self) -> None:
        line = action_explain("claim", group="g")
        assert "--min-idle-ms" in line and "--max-deliveries" in line

    def test_retry_says_when_it_is_already_due(self, settings: object) -> None:
        class Row:
            idle_ms = 59_999

        assert action_explain("retry", Row(), group="billing").startswith("Retry makes it due")
        assert "60 s" in action_explain("retry", Row(), group="billing")
        Row.idle_ms = 60_000
        line = action_explain("retry", Row(), group="billing")
        assert line.startswith("Already due") and "changes nothing" in line


class ExplainOnPageTests:
    def test_each_dialog_says_what_its_action_does(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        page = _group_page(make_client(), stream)
        # One shared dialog per action (row_actions.js adds the entry id to its label).
        claim = labelled_text(page, "Claim entry")
        assert action_explain("claim", group="g") in claim
        assert "counts as one delivery toward --max-deliveries" in claim
        assert action_explain("dead-letter", group="g") in labelled_text(page, "Dead-letter entry")
        assert action_explain("acknowledge", group="g") in labelled_text(page, "Acknowledge entry")

    def test_a_retry_that_would_change_nothing_says_already_due(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        fresh, stale = make_pending(r, stream, "g", "c1", 2)
        _idle(r, stream, stale, 120_000)  # past ACKBOARD_RETRY_IDLE_MS (60 s here)
        rows = table_rows(_group_page(make_client(), stream), "pending-")
        actions = {row_id: cells[-1] for row_id, cells in rows.items()}
        assert "already due" in actions[f"pending-{stale}"]
        assert "already due" not in actions[f"pending-{fresh}"]

    def test_the_group_page_says_what_retry_does_once_and_each_button_points_there(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        fresh, stale = make_pending(r, stream, "g", "c1", 2)
        client = make_client()
        page = _group_page(client, stream)
        assert action_explain("retry", group="g") == element_text(page, "retry-explain")
        assert 'id="retry-due-explain"' not in page, "no row is due: nothing to say"
        assert page.count("Retry makes it due") == 1, "said once, not in each row"
        _idle(r, stream, stale, 120_000)
        page = _group_page(client, stream)
        due_note = element_text(page, "retry-due-explain")
        assert action_explain("retry-due", group="g") in due_note
        described = dict(
            re.findall(
                r'formaction="[^"]*/entries/([^/"]+)/retry/"[^>]*aria-describedby="([^"]+)"', page
            )
        )
        assert described == {fresh: "retry-explain", stale: "retry-due-explain"}
        # Without the permission: neither the buttons nor the words.
        viewer = _group_page(make_client("vera", "view_queues"), stream)
        assert 'id="retry-explain"' not in viewer and "aria-describedby" not in viewer

    def test_the_entry_page_says_what_retry_does_next_to_the_button(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = make_client()
        text = element_text(_entry_page(client, stream, entry_id), "entry-state")
        assert _first_sentence("retry") in text and "Already due" not in text
        _idle(r, stream, entry_id, 120_000)
        text = element_text(_entry_page(client, stream, entry_id), "entry-state")
        assert _first_sentence("retry-due") in text

    def test_the_dlq_page_says_what_replay_delete_and_purge_do(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        _dead_lettered(r, stream)
        page = make_client().get(reverse("dashboard:dlq", args=[stream])).content.decode()
        legend = element_text(page, "dlq-explain")
        assert action_explain("replay") in legend and action_explain("delete") in legend
        purge = labelled_text(page, "Purge the dead-letter stream")
        assert action_explain("purge") in purge
        # The browser's confirm question for Replay says it too (same text, escaped).
        question = re.search(r'hx-confirm="(Replay [^"]*)"', page)
        assert question is not None and "for g only" in question.group(1)

    def test_a_reader_sees_no_explanations_of_buttons_they_lack(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        _dead_lettered(r, stream)
        reader = make_client("reader", "view_queues")
        page = reader.get(reverse("dashboard:dlq", args=[stream])).content.decode()
        assert 'id="dlq-explain"' not in page


def _dead_lettered(r: redis.Redis, stream: str) -> tuple[str, str]:
    [entry_id] = make_pending(r, stream, "g", "c1", 1)
    moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="x")
    assert moved is not None
    return entry_id, moved.dlq_id


class DeadLetterLinkTests:
    def test_origin_id_links_to_its_entry(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        entry_id, dlq_id = _dead_lettered(r, stream)
        page = make_client().get(reverse("dashboard:dlq", args=[stream])).content.decode()
        entry_url = reverse("dashboard:entry-detail", args=[stream, entry_id])
        assert f'<a href="{entry_url}"' in page
        assert table_rows(page, f"dlq-{dlq_id}")[f"dlq-{dlq_id}"][0].startswith(entry_id)

    def test_a_replay_dead_lettered_again_links_to_what_it_replayed(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        entry_id, dlq_id = _dead_lettered(r, stream)
        replayed = dlq_replay(client=r, stream=stream, dlq_id=dlq_id)
        reply: Any = r.xreadgroup("g", "c2", {stream: ">"}, count=1)
        [[_, [(again, fields)]]] = reply
        assert fields[REPLAY_OF_FIELD.encode()] == entry_id.encode()
        moved = entry_dead_letter(
            client=r, stream=stream, group="g", entry_id=again.decode(), reason="again"
        )
        assert moved is not None and again.decode() == replayed.new_id
        page = make_client().get(reverse("dashboard:dlq", args=[stream])).content.decode()
        cell = table_rows(page, f"dlq-{moved.dlq_id}")[f"dlq-{moved.dlq_id}"][0]
        assert f"replay of {entry_id}" in cell
        assert f'<a href="{reverse("dashboard:entry-detail", args=[stream, entry_id])}"' in page

    def test_a_bogus_replay_of_or_origin_id_is_shown_not_linked(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        dlq = stream_keys(stream).dlq
        dlq_id = r.xadd(
            dlq,
            {
                "a": "1",
                REPLAY_OF_FIELD: "not-an-id",
                "ackboard.origin-group": "g",
                "ackboard.origin-id": "<b>9</b>",
            },
        ).decode()
        response = make_client().get(reverse("dashboard:dlq", args=[stream]))
        assert response.status_code == 200
        page = response.content.decode()
        cell = table_rows(page, f"dlq-{dlq_id}")[f"dlq-{dlq_id}"][0]
        assert cell.startswith("<b>9</b>") and "replay of not-an-id" in cell
        assert "&lt;b&gt;9&lt;/b&gt;</a>" not in page and "not-an-id</a>" not in page


class RefusedReplayAuditTests:
    def test_a_replay_refused_for_permission_names_its_group(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        _, dlq_id = _dead_lettered(r, stream)
        reader = make_client("vera", "view_queues")
        response = reader.post(dlq_url(stream, dlq_id, "replay"), headers=HTMX)
        assert response.status_code == 403
        event = last_audit()
        assert (event.action, event.result, event.group) == ("replay", "refused", "g")
        assert r.xlen(stream_keys(stream).dlq) == 1  # nothing was changed

    def test_a_replay_refused_for_a_lost_group_names_it(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        _, dlq_id = _dead_lettered(r, stream)
        r.xgroup_destroy(stream, "g")
        response = make_client().post(dlq_url(stream, dlq_id, "replay"), headers=HTMX)
        assert response.status_code == 409
        event = last_audit()
        assert (event.result, event.group) == ("refused", "g")
