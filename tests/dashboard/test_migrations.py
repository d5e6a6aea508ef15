"""Migrations that move data: the failure index's rows survive the model's rename."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from dashboard.models import IndexedFailure

BEFORE_RENAME = [("dashboard", "0002_roles")]


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor


def latest() -> list[tuple[str, str]]:
    leaves: list[tuple[str, str]] = MigrationExecutor(connection).loader.graph.leaf_nodes(
        "dashboard"
    )
    return leaves


@pytest.mark.django_db(transaction=True)
class IndexedFailureRenameTests:
    def test_rows_indexes_and_uniqueness_survive(self) -> None:
        when = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
        try:
            executor = migrate(BEFORE_RENAME)
            old = executor.loader.project_state(BEFORE_RENAME).apps
            old.get_model("dashboard", "FailureRecord").objects.create(
                failures_key="{orders}:failures",
                source_id="5-0",
                stream="orders",
                group="billing",
                entry_id="1-0",
                consumer="c1",
                attempt=3,
                error_type="ValueError",
                message="kept across the rename",
                failed_at=when,
            )
        finally:
            migrate(latest())
        row = IndexedFailure.objects.get()
        assert (row.source_id, row.attempt, row.message, row.failed_at) == (
            "5-0",
            3,
            "kept across the rename",
            when,
        )
        with connection.cursor() as cursor:
            names = set(
                connection.introspection.get_constraints(cursor, "dashboard_indexedfailure")
            )
        assert {"failure_entry", "failure_time", "failure_unique_src"} <= names
