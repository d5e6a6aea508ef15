"""The SQL engine under the tests, and the one engine-specific piece of SQL: the search budget.

Runs twice in ``uv run pytest``: here on SQLite, and inside test_postgres.py's run of the
database tests on a private PostgreSQL (``ACKBOARD_TEST_DB=postgres``).
"""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.db import connection

from dashboard.insight.failure_index import SearchTooBroad
from dashboard.insight.failure_index.search import statement_budget

pytestmark = pytest.mark.django_db

#: One statement that runs for seconds on either engine, with no table behind it.
SLOW_SQL = {
    "postgresql": "SELECT pg_sleep(5)",
    # ~10^8 VM steps: several seconds of SQLite work.
    "sqlite": (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000000) "
        "SELECT count(*) FROM n"
    ),
}


class DatabaseEngineTests:
    def test_engine_is_the_one_the_run_asked_for(self) -> None:
        expected = {"sqlite": "sqlite", "postgres": "postgresql"}[settings.TEST_DB]
        assert connection.vendor == expected
        if expected == "postgresql":
            # The private server's, never the machine's PostgreSQL on :5432.
            assert connection.settings_dict["HOST"] == "127.0.0.1"
            assert int(connection.settings_dict["PORT"]) != 5432


class StatementBudgetTests:
    def test_a_statement_past_the_budget_is_cut_off_as_too_broad(self) -> None:
        start = time.monotonic()
        with pytest.raises(SearchTooBroad), statement_budget(100), connection.cursor() as cur:
            cur.execute(SLOW_SQL[connection.vendor])
            cur.fetchall()
        assert time.monotonic() - start < 3
        # The connection is usable afterwards (PostgreSQL: the transaction was rolled back).
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)

    def test_a_statement_within_the_budget_runs(self) -> None:
        with statement_budget(5_000), connection.cursor() as cur:
            cur.execute("SELECT 41 + 1")
            assert cur.fetchone() == (42,)

    @pytest.mark.parametrize("budget", [0, -1])
    def test_a_budget_of_zero_refuses_before_any_query(self, budget: int) -> None:
        ran = False
        with pytest.raises(SearchTooBroad, match="budget"), statement_budget(budget):
            ran = True
        assert not ran
