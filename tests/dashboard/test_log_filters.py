"""The library outage filter: channels-redis's traceback a second while Redis is down
becomes one line, and any other error keeps its traceback (dashboard.log_filters)."""

from __future__ import annotations

import logging
import sys

import pytest
import redis

from dashboard.log_filters import LibraryOutage


def _record(error: BaseException) -> logging.LogRecord:
    try:
        raise error
    except BaseException:
        info = sys.exc_info()
    return logging.LogRecord(
        "channels_redis.pubsub", logging.ERROR, __file__, 1,
        "Unexpected exception in receive task", None, info,
    )  # fmt: skip


def test_settings_install_it_on_the_channels_redis_loggers() -> None:
    for name in ("channels_redis.pubsub", "channels_redis.core"):
        assert any(isinstance(f, LibraryOutage) for f in logging.getLogger(name).filters), name


def test_a_connection_error_is_one_warning_line_without_traceback() -> None:
    record = _record(redis.ConnectionError("Error 111 connecting to 127.0.0.1:1"))
    assert LibraryOutage().filter(record)
    assert record.levelname == "WARNING" and record.exc_info is None
    text = logging.Formatter().format(record)
    assert "Traceback" not in text and "\n" not in text
    assert text == (
        "Unexpected exception in receive task: Redis unreachable (ConnectionError: Error 111 "
        "connecting to 127.0.0.1:1); it retries by itself"
    )


def test_repeats_are_folded_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("dashboard.log_filters.time.monotonic", lambda: now[0])
    outage = LibraryOutage(every_s=10)
    assert outage.filter(_record(redis.TimeoutError("t")))
    assert not outage.filter(_record(redis.ConnectionError("c")))
    assert not outage.filter(_record(ConnectionResetError("r")))
    now[0] = 111.0
    record = _record(redis.ConnectionError("c"))
    assert outage.filter(record)
    assert record.getMessage().endswith("(2 more since the last line)")


def test_other_errors_keep_their_traceback() -> None:
    record = _record(ValueError("a bug"))
    assert LibraryOutage().filter(record)
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert "Traceback" in logging.Formatter().format(record)
