"""dashboard.insight.failure_index.retention and ``manage.py prune_failures``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.insight.failure_index import failures_prune, failures_prune_expired
from dashboard.models import IndexedFailure
from tests.clock import FrozenClock
from tests.factories import FAILURE_T0 as T0
from tests.factories import indexed_failure

pytestmark = pytest.mark.django_db


class FailuresPruneTests:
    def test_deletes_only_older_rows_in_batches(self) -> None:
        for i in range(5):
            indexed_failure(message=f"old{i}", minutes=-100 - i)
        indexed_failure(message="new", minutes=0)
        assert failures_prune(older_than=T0, batch_size=2) == 5
        assert list(IndexedFailure.objects.values_list("message", flat=True)) == ["new"]

    def test_command_uses_retention_setting_or_days(
        self, settings: SettingsWrapper, capsys: pytest.CaptureFixture[str]
    ) -> None:
        now = timezone.now()
        indexed_failure(message="10 days", failed_at=now - timedelta(days=10))
        indexed_failure(message="40 days", failed_at=now - timedelta(days=40))
        indexed_failure(message="today", failed_at=now)
        settings.ACKBOARD_FAILURE_RETENTION_DAYS = 30
        call_command("prune_failures")
        assert "Deleted 1 failure record " in capsys.readouterr().out
        call_command("prune_failures", "--days", "5", "--batch", "1")
        assert list(IndexedFailure.objects.values_list("message", flat=True)) == ["today"]

    def test_expired_rows_go_by_the_retention_setting_and_zero_keeps_all(
        self, settings: SettingsWrapper, clock: FrozenClock
    ) -> None:
        now = clock.utc
        indexed_failure(message="10 days", failed_at=now - timedelta(days=10))
        indexed_failure(message="40 days", failed_at=now - timedelta(days=40))
        # The cutoff is the clock's now less 30 days, to the millisecond.
        just = timedelta(days=30, milliseconds=-1)
        indexed_failure(message="just kept", failed_at=now - just)
        indexed_failure(message="just past", failed_at=now - timedelta(days=30, milliseconds=1))
        settings.ACKBOARD_FAILURE_RETENTION_DAYS = 0
        assert failures_prune_expired() == 0
        settings.ACKBOARD_FAILURE_RETENTION_DAYS = 30
        assert failures_prune_expired() == 2
        kept = IndexedFailure.objects.order_by("failed_at").values_list("message", flat=True)
        assert list(kept) == ["just kept", "10 days"]
        clock.advance(2)  # 2 ms later the last one is past the cutoff too
        assert failures_prune_expired() == 1

    def test_command_keeps_everything_when_the_setting_does(
        self, settings: SettingsWrapper, capsys: pytest.CaptureFixture[str]
    ) -> None:
        # One rule for the ingestor's hourly prune and the command: 0 keeps every row.
        indexed_failure(message="40 days", failed_at=timezone.now() - timedelta(days=40))
        settings.ACKBOARD_FAILURE_RETENTION_DAYS = 0
        call_command("prune_failures")
        assert "keeps every record" in capsys.readouterr().out
        assert IndexedFailure.objects.count() == 1
        call_command("prune_failures", "--days", "0")  # asked for by name: all of it
        assert IndexedFailure.objects.count() == 0
