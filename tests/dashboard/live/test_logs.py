"""The live layer's log: a problem that repeats is logged at most once a minute."""

from __future__ import annotations

import logging

import pytest
import redis

from dashboard.runtime import logs

pytestmark = pytest.mark.django_db(transaction=True)


class OutageLogTests:
    """A Redis outage is logged as a short warning once a minute, not once per tick."""

    def test_outage_warnings_are_rate_limited_and_untraced(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        failures = logs.FailureLog()
        with caplog.at_level(logging.WARNING, logger=logs.log.name):
            for _ in range(50):
                failures.report("poll", "live poll", redis.ConnectionError("refused"), traced=False)
        [record] = [r for r in caplog.records if "live poll" in r.getMessage()]
        assert record.levelno == logging.WARNING and record.exc_info is None
        assert "ConnectionError: refused" in record.getMessage()
