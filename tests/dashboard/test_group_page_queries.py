"""The group page's SQL per request, counted: a regression (one more query per request)
fails here. A logged-in request of the group page reads its session (the database, in
tests), the user (django.contrib.auth's get_user), its permissions (one statement,
dashboard.middleware.PermissionsMiddleware), the page's entries' last failures, the rates
(one statement: the latest point and the drain estimate) and, for a group administrator,
the last position reset; nothing else."""

from __future__ import annotations

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.dashboard.action_helpers import MakeClient
from tests.factories import make_pending

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]


def _tables(sql: str) -> str:
    if '"auth_permission"' in sql:
        return "auth_permission"
    for table in ("django_session", "auth_user", "dashboard_indexedfailure"):
        if f'"{table}"' in sql:
            return table
    if '"dashboard_ratesample"' in sql:
        return "dashboard_ratesample"
    if '"dashboard_auditevent"' in sql:
        return "dashboard_auditevent"
    return sql


READS = [
    "django_session",
    "auth_user",
    "auth_permission",
    "dashboard_indexedfailure",
    "dashboard_ratesample",
]


@pytest.mark.parametrize(
    ("codenames", "expected"),
    [
        # A reader: no group administration, so no undo of a position reset to look up.
        (("view_queues",), READS),
        (("view_queues", "administer_group"), [*READS, "dashboard_auditevent"]),
    ],
)
def test_the_group_page_statements(
    r: redis.Redis,
    stream: str,
    make_client: MakeClient,
    codenames: tuple[str, ...],
    expected: list[str],
) -> None:
    make_pending(r, stream, "g", "c1", 3)
    client = make_client("olga", *codenames)
    url = reverse("dashboard:group-detail", args=[stream, "g"])
    assert client.get(url).status_code == 200  # warm: per-process caches filled
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    tables = [_tables(q["sql"]) for q in captured.captured_queries]
    assert tables == expected
