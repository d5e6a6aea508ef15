"""Django's SQLite backend, with the process's idle connections kept for the next request.

Under ASGI, Django runs each request's sync code in a thread of its own (asgiref's
``ThreadSensitiveContext``), and its connections are per thread, so ``CONN_MAX_AGE`` never
reused a SQLite connection: every page opened the file afresh and SQLite parsed the whole
schema again on its first statement (0.3 ms of the 0.8 ms a logged-in page spent on its
first query). Here a connection closed at the end of a request (``CONN_MAX_AGE`` 0) goes
back to a small per-database list instead, and the next request, in whatever thread,
takes it: connect, Django's function registrations and the PRAGMAs ran once, and the
parsed schema is warm (SQLite re-reads it by itself when another process migrates).

Safe to share across threads one at a time: Django opens SQLite connections with
``check_same_thread=False`` and guards sharing itself, and a connection is only ever in
one request's hands (taken from the list, or put back after its request closed it). A
connection still in a transaction (or in an atomic block) is closed for real, never kept,
and so is one closed while Django still marks a database error on it (at a request's end
Django first checks such a connection and clears the mark: a SQLite connection stays
usable after an error); an in-memory database (the tests') is never closed, as in Django.
"""

from __future__ import annotations

import collections
import sqlite3
import threading
from typing import Any, ClassVar

from django.db.backends.sqlite3 import base

#: Idle connections kept per database file; beyond, a closed connection really closes.
IDLE_MAX = 8


class DatabaseWrapper(base.DatabaseWrapper):
    #: Database file name -> its idle connections (most recently used last).
    _idle: ClassVar[dict[str, collections.deque[sqlite3.Connection]]] = {}
    _idle_lock: ClassVar[threading.Lock] = threading.Lock()

    def _idle_list(self) -> collections.deque[sqlite3.Connection]:
        name = str(self.settings_dict["NAME"])
        with self._idle_lock:
            return self._idle.setdefault(name, collections.deque())

    def get_new_connection(self, conn_params: dict[str, Any]) -> sqlite3.Connection:
        if not self.is_in_memory_db():
            idle = self._idle_list()
            try:
                return idle.pop()  # deque.pop is atomic: one taker per connection
            except IndexError:
                pass
        conn: sqlite3.Connection = super().get_new_connection(conn_params)
        return conn

    def _close(self) -> None:
        conn = self.connection
        if (
            conn is None
            or self.is_in_memory_db()
            or self.in_atomic_block
            or self.errors_occurred
            or conn.in_transaction
        ):
            super()._close()  # type: ignore[misc]  # not in django-stubs
            return
        idle = self._idle_list()
        if len(idle) >= IDLE_MAX:
            super()._close()  # type: ignore[misc]
            return
        idle.append(conn)

    @classmethod
    def close_idle(cls) -> None:
        """Really close every kept connection (a test's or a process's clean-up)."""
        with cls._idle_lock:
            lists = list(cls._idle.values())
        for idle in lists:
            while True:
                try:
                    idle.pop().close()
                except IndexError:
                    break
