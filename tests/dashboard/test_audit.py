"""The audit trail: rows and log lines, the entry history lookup, the Audit page and CSV."""

from __future__ import annotations

import csv
import io
import json
import logging
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from dashboard.access.audit import audit_for_entry, audit_record
from dashboard.models import AuditEvent
from dashboard.views.audit import csv_cell
from tests.factories import make_user
from tests.html import table_rows

pytestmark = pytest.mark.django_db

ROW = re.compile(r'<tr id="audit-\d+"')
IDS_COLUMN = 5  # Time, User, Action, Stream, Group, Ids, ...


def _ids_column(page: str) -> list[str]:
    """The Ids cell of every audit row, newest first."""
    return [cells[IDS_COLUMN] for cells in table_rows(page, "audit-").values()]


class AuditRecordTests:
    def test_writes_row_and_json_log_line(
        self, django_user_model: type[User], caplog: pytest.LogCaptureFixture
    ) -> None:
        alice = make_user(django_user_model, "alice")
        with caplog.at_level(logging.INFO, logger="ackboard.audit"):
            event = audit_record(
                user=alice,
                action="dead-letter",
                stream="orders",
                group="billing",
                entry_ids=["1-0"],
                reason="poison",
                result="ok",
                state_before={"consumer": "c1", "deliveries": 3},
                new_ids=["5-0"],
            )
        row = AuditEvent.objects.get(pk=event.pk)
        assert (row.username, row.user_id, row.result) == ("alice", alice.pk, "ok")
        assert row.entry_ids == ["1-0"] and row.new_ids == ["5-0"]
        assert row.state_before == {"consumer": "c1", "deliveries": 3}
        [record] = [r for r in caplog.records if r.name == "ackboard.audit"]
        line = json.loads(record.getMessage())
        assert line["audit_id"] == row.pk
        assert line["action"] == "dead-letter" and line["ids"] == ["1-0"]
        assert line["result"] == "ok" and line["user"] == "alice"

    def test_rejects_unknown_result(self, django_user_model: type[User]) -> None:
        with pytest.raises(ValueError):
            audit_record(user=None, action="retry", stream="s", result="maybe")
        assert not AuditEvent.objects.exists()


class AuditForEntryTests:
    def test_finds_single_bulk_and_replay_rows_only_for_that_id(self) -> None:
        audit_record(user=None, action="retry", stream="s", entry_ids=["1-1"], result="ok")
        audit_record(
            user=None, action="bulk-acknowledge", stream="s", entry_ids=["1-0", "1-1"], result="ok"
        )
        audit_record(user=None, action="claim", stream="s", entry_ids=["11-1"], result="ok")
        audit_record(user=None, action="retry", stream="other", entry_ids=["1-1"], result="ok")
        audit_record(
            user=None, action="replay", stream="s", entry_ids=["9-0"], new_ids=["1-1"], result="ok"
        )
        # A dead-letter id equal to the entry id is a different entry: not its history.
        audit_record(user=None, action="delete", stream="s", entry_ids=["1-1"], result="ok")
        history = audit_for_entry(stream="s", entry_id="1-1")
        assert sorted(e.action for e in history) == ["bulk-acknowledge", "replay", "retry"]
        assert all(e.stream == "s" for e in history)


class CsvCellTests:
    @pytest.mark.parametrize("value", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"])
    def test_prefixes_formula_starts(self, value: str) -> None:
        assert csv_cell(value) == "'" + value

    def test_leaves_plain_text_alone(self) -> None:
        assert csv_cell("1700000000000-0") == "1700000000000-0"
        assert csv_cell(None) == ""


class AuditPageTests:
    def test_requires_login_and_view_permission(
        self, client: Client, django_user_model: type[User]
    ) -> None:
        url = reverse("dashboard:audit")
        assert client.get(url).status_code == 302
        make_user(django_user_model, "nobody")
        client.login(username="nobody", password="pw")
        assert client.get(url).status_code == 403
        assert client.get(reverse("dashboard:audit-csv")).status_code == 403

    def test_filters_by_user_action_and_stream(
        self, client: Client, django_user_model: type[User]
    ) -> None:
        make_user(django_user_model, "reader", "view_queues")
        audit_record(user=None, action="retry", stream="orders", entry_ids=["1-0"], result="ok")
        bob = make_user(django_user_model, "bob")
        audit_record(user=bob, action="claim", stream="orders", entry_ids=["2-0"], result="ok")
        audit_record(user=bob, action="retry", stream="mail", entry_ids=["3-0"], result="refused")
        client.login(username="reader", password="pw")
        url = reverse("dashboard:audit")
        page = client.get(url).content.decode()
        assert len(ROW.findall(page)) == 3
        # The ids column of each row, not the whole page: the page prints today's date,
        # and "2-0" is inside "2026-12-01".
        body = client.get(url, {"user": "bob", "action": "retry"}).content.decode()
        assert _ids_column(body) == ["3-0"]
        body = client.get(url, {"stream": "orders"}).content.decode()
        assert _ids_column(body) == ["2-0", "1-0"]

    def test_shows_which_channel_acted(self, client: Client, django_user_model: type[User]) -> None:
        make_user(django_user_model, "reader", "view_queues")
        bob = make_user(django_user_model, "bob")
        for n, channel in enumerate(("button", "cli", "api")):
            audit_record(
                user=bob, action="retry", stream="s", entry_ids=[f"{n}-0"], result="ok",
                channel=channel,
            )  # fmt: skip
        client.login(username="reader", password="pw")
        page = client.get(reverse("dashboard:audit")).content.decode()
        rows = table_rows(page, "audit-").values()
        assert [(cells[IDS_COLUMN], cells[IDS_COLUMN + 2]) for cells in rows] == [
            ("2-0", "api"), ("1-0", "cli"), ("0-0", "button")
        ]  # fmt: skip

    def test_htmx_gets_only_the_table_partial(
        self, client: Client, django_user_model: type[User]
    ) -> None:
        make_user(django_user_model, "reader", "view_queues")
        client.login(username="reader", password="pw")
        response = client.get(reverse("dashboard:audit"), headers={"HX-Request": "true"})
        body = response.content.decode()
        assert body.lstrip().startswith('<div id="audit-table">')
        assert "<html" not in body

    def test_pages_fifty_rows(self, client: Client, django_user_model: type[User]) -> None:
        make_user(django_user_model, "reader", "view_queues")
        for i in range(60):
            audit_record(user=None, action="retry", stream="s", entry_ids=[f"{i}-0"], result="ok")
        client.login(username="reader", password="pw")
        first = client.get(reverse("dashboard:audit")).content.decode()
        second = client.get(reverse("dashboard:audit"), {"page": 2}).content.decode()
        assert len(ROW.findall(first)) == 50 and len(ROW.findall(second)) == 10
        assert "59-0" in first and "0-0" in second

    def test_csv_export_filters_and_escapes(
        self, client: Client, django_user_model: type[User]
    ) -> None:
        make_user(django_user_model, "reader", "view_queues")
        audit_record(
            user=None,
            action="acknowledge",
            stream="orders",
            entry_ids=["1-0", "2-0"],
            reason='=HYPERLINK("http://evil")',
            result="ok",
        )
        audit_record(user=None, action="retry", stream="mail", entry_ids=["3-0"], result="ok")
        client.login(username="reader", password="pw")
        response = client.get(reverse("dashboard:audit-csv"), {"stream": "orders"})
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(response.getvalue().decode())))
        assert len(rows) == 1
        assert rows[0]["ids"] == "1-0 2-0"
        assert rows[0]["channel"] == "button"
        assert rows[0]["reason"] == '\'=HYPERLINK("http://evil")'
