"""The entry page's "State in each group": a dead-lettered entry says so and links to its
dead letter; an acknowledged one says it is not in the dead-letter stream; the lookup is
bounded (``selectors.entry_dead_letters``), and the page says when it could not tell."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
from django.test import Client
from django.urls import reverse

from queue_core import selectors, services
from queue_core.keys import stream_keys
from tests.dashboard.action_helpers import MakeClient
from tests.factories import add_entries, make_group, make_pending
from tests.html import table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]


def _states(client: Client, stream: str, entry_id: str) -> dict[str, list[str]]:
    response = client.get(reverse("dashboard:entry-detail", args=[stream, entry_id]))
    assert response.status_code == 200
    rows = table_rows(response.content.decode(), "state-row-")
    return {cells[0]: cells[1:] for cells in rows.values()}


def _dlq_link(client: Client, stream: str, entry_id: str) -> str:
    from html.parser import HTMLParser

    response = client.get(reverse("dashboard:entry-detail", args=[stream, entry_id]))
    hrefs: list[str] = []

    class Links(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            href = dict(attrs).get("href") or ""
            if tag == "a" and "/dlq/" in href and "#dlq-" in href:
                hrefs.append(href)

    Links().feed(response.content.decode())
    (href,) = hrefs
    return href


class EntryStateTests:
    def test_dead_lettered_acknowledged_and_pending_are_told_apart(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        (entry_id,) = make_pending(r, stream, "billing", "w1", 1)
        for group in ("shipping", "audit"):
            make_group(r, stream, group)
            r.xreadgroup(group, "w2", {stream: ">"})
        r.xack(stream, "shipping", entry_id)
        moved = services.entry_dead_letter(
            client=r, stream=stream, group="audit", entry_id=entry_id, reason="bad", operator="op"
        )
        assert moved is not None
        states = _states(make_client(), stream, entry_id)
        assert states["audit"] == [
            "dead-lettered",
            f"Delivered, then moved to the dead-letter stream as {moved.dlq_id}.",
        ]
        assert states["shipping"] == [
            "acknowledged",
            "Delivered and acknowledged (not in the dead-letter stream).",
        ]
        assert states["billing"][0] == "pending"

    def test_the_link_opens_the_dead_letter_page_at_it(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "w1", 3)
        dlq_ids = [
            services.entry_dead_letter(client=r, stream=stream, group="g", entry_id=i, reason="x")
            for i in ids
        ]
        client = make_client()
        href = _dlq_link(client, stream, ids[1])
        url = urlsplit(href)
        assert url.fragment == f"dlq-{dlq_ids[1].dlq_id}"
        page = client.get(url.path, parse_qs(url.query))
        rows = table_rows(page.content.decode(), "dlq-")
        # Newest first from the linked one: it heads the page.
        assert next(iter(rows)) == url.fragment

    def test_a_later_dead_letter_past_the_budget_is_not_claimed_acknowledged(
        self, r: redis.Redis, stream: str, make_client: MakeClient, monkeypatch: Any
    ) -> None:
        (entry_id,) = make_pending(r, stream, "g", "w1", 1)
        dlq = stream_keys(stream).dlq
        for n in range(5):  # other entries' dead letters, moved after this one was added
            r.xadd(dlq, {"ackboard.origin-id": f"1-{n}", "ackboard.origin-group": "g"})
        services.entry_dead_letter(
            client=r, stream=stream, group="g", entry_id=entry_id, reason="x"
        )
        monkeypatch.setattr(
            selectors,
            "entry_dead_letters",
            _with_budget(selectors.entry_dead_letters, 3),
        )
        state, text = _states(make_client(), stream, entry_id)["g"]
        assert state == "acknowledged"
        assert text.startswith("Delivered and no longer pending: acknowledged, unless it was")
        assert "after the 3 dead letters looked at" in text


def _with_budget(selector: Any, budget: int) -> Any:
    def call(**kw: Any) -> Any:
        return selector(**kw, budget=budget)

    return call


class EntryDeadLettersTests:
    """The selector: a bounded walk from a start id, in chunks."""

    def test_finds_only_this_entrys_dead_letters(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "w1", 3)
        moved = [
            services.entry_dead_letter(client=r, stream=stream, group="g", entry_id=i, reason="x")
            for i in ids
        ]
        found = selectors.entry_dead_letters(client=r, stream=stream, entry_id=ids[1], since_ms=0)
        assert found is not None
        assert found.found == (("g", moved[1].dlq_id),)
        assert (found.scanned, found.complete) == (3, True)

    def test_starts_at_since_and_stops_at_the_budget(self, r: redis.Redis, stream: str) -> None:
        dlq = stream_keys(stream).dlq
        for n in range(1, 8):
            r.xadd(dlq, {"ackboard.origin-id": f"{n}-0", "ackboard.origin-group": "g"}, id=f"{n}-0")
        look = selectors.entry_dead_letters
        got = look(client=r, stream=stream, entry_id="5-0", since_ms=3, budget=2)
        assert got is not None and (got.found, got.scanned, got.complete) == ((), 2, False)
        assert got.last_id == "4-0"
        got = look(client=r, stream=stream, entry_id="5-0", since_ms=3, budget=100)
        assert got is not None and got.found == (("g", "5-0"),) and got.scanned == 5
        got = look(client=r, stream=stream, entry_id="2-0", since_ms=3, budget=100)
        assert got is not None and got.found == ()  # before the start: not looked at

    def test_chunks_grow_and_stop_at_the_byte_budget(self, r: redis.Redis, stream: str) -> None:
        dlq = stream_keys(stream).dlq
        for n in range(1, 301):
            r.xadd(dlq, {"p": "x" * 1000, "ackboard.origin-id": f"{n}-0"}, id=f"{n}-0")
        look = selectors.entry_dead_letters
        got = look(client=r, stream=stream, entry_id="999-0", since_ms=0, byte_budget=50_000)
        assert got is not None and not got.complete
        assert got.scanned < 100  # ~50 KB of 1 KB dead letters, then it stops
        got = look(client=r, stream=stream, entry_id="300-0", since_ms=0)
        assert got is not None and got.complete and got.found == (("", "300-0"),)
        # Told which groups to look for, it stops at the chunk where the last was found.
        got = look(client=r, stream=stream, entry_id="5-0", since_ms=0, groups=[""])
        assert got is not None and got.complete and got.found == (("", "5-0"),)
        assert got.scanned == selectors.ENTRY_DLQ_FIRST

    def test_no_dead_letter_stream(self, r: redis.Redis, stream: str) -> None:
        add_entries(r, stream, 1)
        got = selectors.entry_dead_letters(client=r, stream=stream, entry_id="1-0", since_ms=0)
        assert got is not None and (got.found, got.scanned, got.complete) == ((), 0, True)
