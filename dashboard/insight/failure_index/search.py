"""The Failures page's search: filters, a time budget, and keyset paging.

Owns what one may search by (``FailureFilter``), the page of results with its cursors,
the cursor format, and the per-search statement budget that stops a too-broad search
(``SearchTooBroad``) instead of letting it hold the database. Reads only; never touches
Redis. Cost: one query of ``page_size + 1`` rows, at most ``SEARCH_BUDGET_MS`` long.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import Q, QuerySet

from dashboard.access.scopes import reach_q
from dashboard.models import IndexedFailure

#: Rows per page of the Failures page.
SEARCH_PAGE_SIZE = 50
#: Database time one search may take before it is cut off as too broad (overridable with
#: settings.ACKBOARD_FAILURE_SEARCH_MS).
SEARCH_BUDGET_MS = 1500


class SearchTooBroad(Exception):  # noqa: N818 - reads as the condition it reports
    """The search hit its time budget: the user should narrow it."""


class BadCursor(ValueError):
    """A paging cursor that is not one this module made."""


@dataclass(frozen=True, slots=True)
class FailureFilter:
    """What the Failures page searches by. Empty strings and None mean "any"."""

    stream: str = ""
    group: str = ""
    error_type: str = ""
    text: str = ""
    since: datetime | None = None
    until: datetime | None = None
    #: The stream patterns the searcher may read (``dashboard.access.scopes``); None: all.
    reach: tuple[str, ...] | None = None

    @property
    def empty(self) -> bool:
        return not (self.stream or self.group or self.error_type or self.text) and (
            self.since is None and self.until is None
        )


@dataclass(frozen=True, slots=True)
class FailurePage:
    """One page of matches, newest first, with keyset cursors to the pages beside it."""

    rows: tuple[IndexedFailure, ...]
    newer: str | None
    older: str | None
    elapsed_ms: float = field(default=0.0, compare=False)


def cursor_encode(row: IndexedFailure) -> str:
    micros = int(row.failed_at.timestamp() * 1_000_000)
    return f"{micros}.{row.pk}"


def cursor_decode(value: str) -> tuple[datetime, int]:
    """``"<epoch µs>.<id>"`` back to ``(failed_at, id)``; BadCursor if it is not one."""
    micros, dot, pk = value.partition(".")
    if not (dot and micros.isdigit() and pk.isdigit() and len(value) <= 40):
        raise BadCursor(value[:50])
    try:
        when = datetime.fromtimestamp(int(micros) / 1_000_000, tz=UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise BadCursor(value[:50]) from exc
    return when, int(pk)


def failure_filter_queryset(*, filters: FailureFilter) -> QuerySet[IndexedFailure]:
    """The rows matching ``filters``, unordered. Equality filters and the time range are
    served by the indexes (stream[, group], failed_at) or (error_type, failed_at); the text
    filter is a LIKE on the rows those leave, which is why searches carry a time budget.
    """
    qs = IndexedFailure.objects.all()
    reach = reach_q(filters.reach)
    if reach is not None:
        qs = qs.filter(reach)
    if filters.stream:
        qs = qs.filter(stream=filters.stream)
    if filters.group:
        qs = qs.filter(group=filters.group)
    if filters.error_type:
        qs = qs.filter(error_type=filters.error_type)
    if filters.since is not None:
        qs = qs.filter(failed_at__gte=filters.since)
    if filters.until is not None:
        qs = qs.filter(failed_at__lt=filters.until)
    if filters.text:
        qs = qs.filter(Q(message__icontains=filters.text) | Q(traceback__icontains=filters.text))
    return qs


@contextmanager
def statement_budget(ms: int) -> Iterator[None]:
    """Cut off any query inside the block that runs longer than ``ms``: SearchTooBroad.

    SQLite: a progress handler checked every 1,000 VM steps interrupts the statement.
    PostgreSQL: ``SET LOCAL statement_timeout`` in a transaction. Other databases: no cap.
    A budget of 0 or less refuses at once, on every database: PostgreSQL cannot express
    it (its finest timeout is 1 ms, and 0 there means no timeout at all).
    """
    if ms <= 0:
        raise SearchTooBroad(f"the search budget is {ms} ms")
    deadline = time.monotonic() + ms / 1000
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        raw: Any = connection.connection
        raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        try:
            yield
        except OperationalError as exc:
            if "interrupted" in str(exc):
                raise SearchTooBroad(str(exc)) from exc
            raise
        finally:
            raw.set_progress_handler(None, 0)
    elif connection.vendor == "postgresql":
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL statement_timeout = %s", [max(1, int(ms))])
                yield
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) == "57014" or "timeout" in str(exc):
                raise SearchTooBroad(str(exc)) from exc
            raise
    else:
        yield


def search_budget_ms() -> int:
    """How long one search may run: ``settings.ACKBOARD_FAILURE_SEARCH_MS`` or 1,500 ms."""
    return int(getattr(settings, "ACKBOARD_FAILURE_SEARCH_MS", SEARCH_BUDGET_MS))


def failure_search(
    *,
    filters: FailureFilter,
    before: str | None = None,
    after: str | None = None,
    page_size: int = SEARCH_PAGE_SIZE,
    budget_ms: int | None = None,
) -> FailurePage:
    """A page of failures matching ``filters``, newest first, keyset-paged.

    ``before``: rows older than that cursor (the "Older" link); ``after``: rows newer
    (the "Newer" link); neither: the newest page. Keyset paging keeps a deep page as cheap
    as the first. One query of ``page_size + 1`` rows, cut off after ``budget_ms``
    (default ``search_budget_ms()``) with SearchTooBroad.
    Raises BadCursor on a cursor this module did not make.
    """
    budget = budget_ms if budget_ms is not None else search_budget_ms()
    qs = _keyset(failure_filter_queryset(filters=filters), before=before, after=after)
    started = time.perf_counter()
    with statement_budget(budget):
        fetched = list(qs[: page_size + 1])
    elapsed = (time.perf_counter() - started) * 1000
    return _page(fetched, page_size=page_size, before=before, after=after, elapsed_ms=elapsed)


def _keyset(
    qs: QuerySet[IndexedFailure], *, before: str | None, after: str | None
) -> QuerySet[IndexedFailure]:
    """``qs`` from the cursor on, in reading order: newest first, or oldest first after
    ``after`` (the Newer link reads upwards from its cursor; ``_page`` turns it back)."""
    if before is not None:
        when, pk = cursor_decode(before)
        # The first term is an index range; the second breaks ties on the same instant.
        qs = qs.filter(failed_at__lte=when).filter(Q(failed_at__lt=when) | Q(id__lt=pk))
        return qs.order_by("-failed_at", "-id")
    if after is not None:
        when, pk = cursor_decode(after)
        qs = qs.filter(failed_at__gte=when).filter(Q(failed_at__gt=when) | Q(id__gt=pk))
        return qs.order_by("failed_at", "id")
    return qs.order_by("-failed_at", "-id")


def _page(
    fetched: list[IndexedFailure],
    *,
    page_size: int,
    before: str | None,
    after: str | None,
    elapsed_ms: float,
) -> FailurePage:
    """The page shown (newest first) from ``page_size + 1`` fetched rows, with the cursors
    of the pages beside it: a link only where there is a page to go to."""
    more = len(fetched) > page_size
    rows = fetched[:page_size]
    if after is not None and before is None:
        rows.reverse()
        newer = cursor_encode(rows[0]) if more and rows else None
        older = cursor_encode(rows[-1]) if rows else None
    else:
        newer = cursor_encode(rows[0]) if before is not None and rows else None
        older = cursor_encode(rows[-1]) if more and rows else None
    return FailurePage(rows=tuple(rows), newer=newer, older=older, elapsed_ms=elapsed_ms)
