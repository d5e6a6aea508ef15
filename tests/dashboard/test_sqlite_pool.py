"""dashboard.runtime.sqlite3: a SQLite connection closed at a request's end serves the next one.

Each test builds its own ``ConnectionHandler`` over its own database file, so the suite's
database and its kept connections are never touched. A request's thread is a new thread
here, as under ASGI (asgiref's ThreadSensitiveContext), where Django's per-thread
connections were never reused before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db.utils import ConnectionHandler

from dashboard.runtime.sqlite3 import base


@pytest.fixture(autouse=True)
def _own_databases(django_db_blocker: Any) -> Iterator[None]:
    """These tests open only their own files (pytest-django blocks database access)."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def handler(tmp_path: Path) -> Iterator[ConnectionHandler]:
    handler = ConnectionHandler(
        {
            "default": {
                "ENGINE": "dashboard.runtime.sqlite3",
                "NAME": str(tmp_path / "pool.sqlite3"),
                "CONN_MAX_AGE": 0,
            }
        }
    )
    yield handler
    base.DatabaseWrapper.close_idle()


def in_thread(fn: Callable[[], Any]) -> Any:
    """``fn``'s result, run in a new thread (a request's own thread under ASGI)."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


def request(handler: ConnectionHandler, sql: str = "SELECT 1") -> tuple[Any, Any]:
    """One request: a query, then the end-of-request close; (raw connection, result)."""
    conn = handler["default"]
    with conn.cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
    raw = conn.connection
    conn.close_if_unusable_or_obsolete()  # request_finished, CONN_MAX_AGE 0: close
    assert conn.connection is None
    return raw, row


class SqlitePoolTests:
    def test_the_next_request_in_another_thread_reuses_the_connection(
        self, handler: ConnectionHandler
    ) -> None:
        first, _ = in_thread(lambda: request(handler, "CREATE TABLE t (x INTEGER)"))
        second, _ = in_thread(lambda: request(handler, "INSERT INTO t VALUES (1)"))
        third, row = in_thread(lambda: request(handler, "SELECT count(*) FROM t"))
        assert second is first and third is first
        assert row == (1,)
        # Kept, not closed: it still answers.
        assert first.execute("SELECT 2").fetchone() == (2,)

    def test_a_kept_connection_is_set_up_like_a_new_one(self, handler: ConnectionHandler) -> None:
        in_thread(lambda: request(handler))
        _, fks = in_thread(lambda: request(handler, "PRAGMA foreign_keys"))
        assert fks == (1,)  # Django's PRAGMA ran once, on the first opening
        _, regexp = in_thread(lambda: request(handler, "SELECT 'abc' REGEXP 'b'"))
        assert regexp == (1,)  # and its Python functions stay registered

    def test_a_connection_left_in_a_transaction_is_closed_not_kept(
        self, handler: ConnectionHandler
    ) -> None:
        in_thread(lambda: request(handler, "CREATE TABLE t (x INTEGER)"))

        def dies_in_a_transaction() -> Any:
            conn = handler["default"]
            conn.set_autocommit(False)  # what atomic() does (its global handler is not ours)
            conn.cursor().execute("INSERT INTO t VALUES (1)")
            raw = conn.connection
            assert raw.in_transaction
            conn.close()  # the request ends without a commit
            return raw

        raw = in_thread(dies_in_a_transaction)
        again, row = in_thread(lambda: request(handler, "SELECT count(*) FROM t"))
        assert again is not raw
        assert row == (0,)  # the half-done insert was never committed by a reuse

    def test_a_connection_after_a_database_error_is_closed_not_kept(
        self, handler: ConnectionHandler
    ) -> None:
        def fails() -> Any:
            conn = handler["default"]
            with pytest.raises(Exception, match="no such table"), conn.cursor() as cursor:
                cursor.execute("SELECT * FROM missing")
            raw = conn.connection
            assert conn.errors_occurred
            conn.close()
            return raw

        raw = in_thread(fails)
        again, _ = in_thread(lambda: request(handler))
        assert again is not raw

    def test_at_most_idle_max_connections_are_kept(self, handler: ConnectionHandler) -> None:
        opened = base.IDLE_MAX + 3
        barrier = threading.Barrier(opened)
        raws: list[Any] = []

        def concurrent_request() -> None:
            conn = handler["default"]
            conn.ensure_connection()
            barrier.wait()  # all open at once: none can take another's
            raws.append(conn.connection)
            barrier.wait()
            conn.close()

        threads = [threading.Thread(target=concurrent_request) for _ in range(opened)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({id(raw) for raw in raws}) == opened
        name = handler.settings["default"]["NAME"]
        assert len(base.DatabaseWrapper._idle[name]) == base.IDLE_MAX

    def test_an_in_memory_database_keeps_django_s_behaviour(self) -> None:
        handler = ConnectionHandler(
            {
                "default": {
                    "ENGINE": "dashboard.runtime.sqlite3",
                    "NAME": ":memory:",
                    "CONN_MAX_AGE": 0,
                }
            }
        )
        conn = handler["default"]
        conn.ensure_connection()
        raw = conn.connection
        conn.close()  # Django ignores it: closing would destroy the database
        assert conn.connection is raw
        assert ":memory:" not in base.DatabaseWrapper._idle
        raw.close()
