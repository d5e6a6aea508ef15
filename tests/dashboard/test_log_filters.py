"""The library outage filter: channels-redis's traceback a second while Redis is down
becomes one line, and any other error keeps its traceback (dashboard.runtime.log_filters)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
import redis
from django.test import Client
from django.urls import reverse

from dashboard.runtime.log_filters import ClientErrorLine, LibraryOutage


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
    monkeypatch.setattr("dashboard.runtime.log_filters.time.monotonic", lambda: now[0])
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


class ClientErrorLineTests:
    """A 4xx that Django answers for an exception (PermissionDenied, BadRequest) is logged
    as one line; a 5xx keeps its traceback."""

    def test_settings_install_it_on_the_django_request_logger(self) -> None:
        filters = logging.getLogger("django.request").filters
        assert any(isinstance(f, ClientErrorLine) for f in filters)

    @pytest.mark.django_db
    def test_a_denied_request_is_one_line(
        self, django_user_model: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        client = Client(raise_request_exception=False)
        client.force_login(django_user_model.objects.create_user("nobody", password="pw"))
        with caplog.at_level(logging.WARNING, logger="django.request"):
            assert client.get(reverse("dashboard:overview")).status_code == 403
        (record,) = [r for r in caplog.records if r.name == "django.request"]
        assert record.levelname == "WARNING" and record.exc_info is None
        text = logging.Formatter().format(record)
        assert (
            text == "Forbidden (Permission denied): / (PermissionDenied: You may not view queues.)"
        )

    def test_a_server_error_keeps_its_traceback(self) -> None:
        record = _record(RuntimeError("boom"))
        record.status_code = 500
        assert ClientErrorLine().filter(record)
        assert record.exc_info is not None
        assert "Traceback" in logging.Formatter().format(record)
