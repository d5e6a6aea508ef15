"""The overview's stream index in this web process: which one, who refreshes it, and views.

Owns three things around ``queue_core.stream_index.StreamIndex``:

- **One index per process and configuration** (Redis URL, allowlist, cap). The first
  request that finds none builds it (``overview_index``): one bounded discovery, at most
  ``FIRST_BUILD_S`` of SCAN steps (plus, the first time an order by figures is asked
  for, summary steps within the same budget); whatever is not done by then is shown as
  "discovering…" or "figures still being gathered" and filled in by the refresher.
- **The refresher**: one daemon thread per process that calls ``StreamIndex.step`` on the
  index in use, pausing between steps while a pass or a round is under way (``DUTY``: at
  most a quarter of one core) and sleeping until the next one is due otherwise. Rounds of
  figures run only while someone orders by them (or /metrics reads them) within
  ``IDLE_STOP_S``; the names are always kept. So
  discovery (SCAN, O(keyspace)) and the figures used for ordering never run on a
  request once the index is built. It stops after ``IDLE_STOP_S`` without an overview
  request (a process nobody looks at does not scan) and starts again with the next one.
  With several web processes each has its own index and refresher (fine: a few hundred
  KB each at 10,000 names): Redis sees one pass per process per
  ``ACKBOARD_INDEX_REFRESH_S``, and two processes may list a new stream a pass apart.
- **Views of the index**: ``OverviewQuery`` (the name filter, sort order and page number,
  parsed from a query string and written back canonically, so the page, its pager and its
  live socket carry the same view) and the ordered name list of a view, cached per index
  generation (and, for orders by figures, for ``ORDER_TTL_S``).

Costs: a request with a built index makes no Redis call here and sorts nothing: the
orders by figures are sorted by the refresher (at most every ``ORDER_TTL_S``), a name
filter is one pass over an order in memory (about 15 ms at 10,000 names), done once per
view and cached; the request then slices its page and reads only its rows
(``selectors.stream_summaries``). This module never writes to Redis.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

import redis
from django.conf import settings
from django.utils.module_loading import import_string
from redis.exceptions import RedisClusterException

from dashboard.access.scopes import reach_filter
from dashboard.runtime.connection import get_redis
from queue_core.connection import Client
from queue_core.stream_index import StreamIndex
from queue_core.types import StreamSummary

log = logging.getLogger("dashboard.stream_index")

#: Most time the first request of a process spends building the index.
FIRST_BUILD_S = 2.0
#: Pause between two refresh steps while a pass or round is under way (the web requests
#: of this process run meanwhile): at least this, and at least (1 - DUTY) / DUTY times
#: the step's own time, so the refresher uses at most DUTY of one core (a 100-stream
#: summary step takes 10-15 ms of Python on the 2-core test machine).
STEP_PAUSE_S = 0.02
DUTY = 0.25
#: The refresher stops after this long without an overview request.
IDLE_STOP_S = 600.0
#: An order by figures (health, lag, pending, oldest) is re-sorted at most this often, by
#: the refresher (about 50 ms per order at 10,000 streams; health also computes each
#: stream's badge once per new figure).
ORDER_TTL_S = 5.0
#: Views whose order is kept (filter + sort combinations).
ORDER_CACHE_SIZE = 32
#: Longest name filter accepted.
MAX_FILTER_LENGTH = 200
#: Highest page number accepted (far above any real overview).
MAX_PAGE = 1_000_000

#: The sort orders, each with its label; every one but "name" orders by the figures table.
SORTS: dict[str, str] = {
    "name": "name",
    "health": "health, worst first",
    "lag": "largest lag",
    "pending": "most pending",
    "oldest": "oldest pending",
}
_GLOB = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class OverviewQuery:
    """One view of the overview: a name filter (a glob when it holds ``*``, ``?`` or
    ``[``, case-sensitive like Redis MATCH; else a case-insensitive substring), a sort
    order and a page number (from 1)."""

    q: str = ""
    sort: str = "name"
    page: int = 1

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> OverviewQuery:
        """From query parameters; ValueError with a message a user can act on."""
        q = params.get("q", "").strip()
        if len(q) > MAX_FILTER_LENGTH:
            raise ValueError(f"The name filter is longer than {MAX_FILTER_LENGTH} characters.")
        if any(ord(c) < 32 or ord(c) == 127 for c in q):
            raise ValueError("The name filter may not contain control characters.")
        if "[" in q and "]" not in q[q.index("[") + 1 :]:
            raise ValueError("The name filter has a '[' without its closing ']'.")
        sort = params.get("sort", "").strip() or "name"
        if sort not in SORTS:
            raise ValueError("Sort by one of: " + ", ".join(SORTS) + ".")
        raw_page = params.get("page", "").strip() or "1"
        if not raw_page.isascii() or not raw_page.isdigit() or not 1 <= int(raw_page) <= MAX_PAGE:
            raise ValueError(f"The page must be a whole number from 1 to {MAX_PAGE}.")
        return cls(q=q, sort=sort, page=int(raw_page))

    @classmethod
    def from_view(cls, view: str) -> OverviewQuery:
        """From a canonical query string (``encode``); ValueError when malformed."""
        return cls.parse(dict(parse_qsl(view, keep_blank_values=True)))

    def encode(self, *, page: int | None = None) -> str:
        """The canonical query string, defaults left out ("" for the default view)."""
        page = self.page if page is None else page
        pairs = [("q", self.q), ("sort", "" if self.sort == "name" else self.sort)]
        pairs.append(("page", "" if page == 1 else str(page)))
        return urlencode([(k, v) for k, v in pairs if v])

    @property
    def glob(self) -> bool:
        return bool(_GLOB & set(self.q))

    def matches(self, name: str) -> bool:
        if not self.q:
            return True
        if self.glob:
            return fnmatch.fnmatchcase(name, self.q)
        return self.q.casefold() in name.casefold()


@dataclass(frozen=True, slots=True)
class OverviewPage:
    """One page of a view: the names on it and where it stands."""

    names: tuple[str, ...]
    page: int
    pages: int
    matched: int
    total: int
    size: int

    @property
    def first(self) -> int:
        """The 1-based position of its first row (0 when empty)."""
        return (self.page - 1) * self.size + 1 if self.names else 0

    @property
    def last(self) -> int:
        return self.first + len(self.names) - 1 if self.names else 0


# --- the index of this process ------------------------------------------------------------

_lock = threading.Lock()
_indexes: OrderedDict[tuple[object, ...], StreamIndex] = OrderedDict()
_build_locks: dict[int, threading.Lock] = {}
_figures_built: set[int] = set()
#: When an order by figures (or /metrics above its fresh limit) last asked for them.
_figures_wanted_at = float("-inf")
_in_use: StreamIndex | None = None
_in_use_key: tuple[object, ...] = ()
_used_at = 0.0
_refresher: _Refresher | None = None


def _key() -> tuple[object, ...]:
    return (
        settings.ACKBOARD_REDIS_URL,
        tuple(settings.ACKBOARD_STREAMS),
        int(settings.ACKBOARD_MAX_STREAMS),
        float(settings.ACKBOARD_INDEX_REFRESH_S),
    )


def index_current(*, create: bool = True) -> StreamIndex | None:
    """The index for the current settings (created empty when ``create``), no Redis."""
    key = _key()
    with _lock:
        index = _indexes.get(key)
        if index is None and create:
            index = StreamIndex(
                patterns=tuple(settings.ACKBOARD_STREAMS),
                cap=int(settings.ACKBOARD_MAX_STREAMS),
                refresh_s=float(settings.ACKBOARD_INDEX_REFRESH_S),
            )
            _indexes[key] = index
            _build_locks[id(index)] = threading.Lock()
            while len(_indexes) > 4:  # settings changed (tests): forget the oldest
                _, old = _indexes.popitem(last=False)
                _build_locks.pop(id(old), None)
                _figures_built.discard(id(old))
        return index


def indexes_forget() -> None:
    """Forget every index of this process (benchmarks; the next request builds anew)."""
    refresher_stop()
    with _lock:
        _indexes.clear()
        _build_locks.clear()
        _figures_built.clear()
        _orders.clear()
        _full.clear()
        _sorts_used.clear()


def overview_index(*, client: Client, figures: bool = False) -> StreamIndex:
    """The index an overview request reads: built now (bounded, ``FIRST_BUILD_S``) if this
    process has none yet, with its figures too the first time ``figures`` are asked for
    (an order by figures); the refresher is (re)started to keep it warm."""
    global _in_use, _in_use_key, _used_at, _figures_wanted_at
    index = index_current()
    assert index is not None

    def needed() -> bool:
        return not index.ready or (figures and id(index) not in _figures_built)

    if needed():
        with _build_locks.get(id(index)) or threading.Lock():
            if needed():  # another request may have built it meanwhile
                index.build(client=client, budget_s=FIRST_BUILD_S, figures=figures)
                if figures:
                    _figures_built.add(id(index))
    with _lock:
        _in_use, _in_use_key, _used_at = index, _key(), time.monotonic()
        if figures:
            _figures_wanted_at = _used_at
    if settings.ACKBOARD_INDEX_BACKGROUND:
        _refresher_ensure()
    return index


class _Refresher(threading.Thread):
    """Steps the index in use; see the module docstring."""

    def __init__(self) -> None:
        super().__init__(name="ackboard-stream-index", daemon=True)
        self.wake = threading.Event()
        self.stopping = False
        self.steps = 0
        self.sorted_at = 0.0

    def run(self) -> None:
        global _refresher
        failures = 0
        while not self.stopping:
            with _lock:
                index, key, idle = _in_use, _in_use_key, time.monotonic() - _used_at
                figures = time.monotonic() - _figures_wanted_at < IDLE_STOP_S
                if index is None or idle > IDLE_STOP_S:
                    _refresher = None
                    return
            if key != _key():  # the settings moved on (tests): the next request says where
                self.wake.wait(0.5)
                self.wake.clear()
                continue
            try:
                began = time.monotonic()
                report = index.step(client=get_redis(), figures=figures)
                if figures and time.monotonic() - self.sorted_at >= ORDER_TTL_S:
                    orders_refresh(index)
                    self.sorted_at = time.monotonic()
                took = time.monotonic() - began
                self.steps += 1
                failures = 0
                pause = max(STEP_PAUSE_S, took * (1 - DUTY) / DUTY) if report.busy else 0.5
            except (redis.RedisError, RedisClusterException) as exc:
                failures += 1
                pause = min(30.0, 0.5 * 2**failures)
                log.warning("stream index refresh failed (retrying in %.1fs): %s", pause, exc)
            except Exception:  # a bug must not end the refresher for the process's life
                log.exception("stream index refresh step failed")
                pause = 5.0
            self.wake.wait(pause)
            self.wake.clear()


def _refresher_ensure() -> None:
    global _refresher
    with _lock:
        if _refresher is None or not _refresher.is_alive():
            _refresher = _Refresher()
            _refresher.start()


def refresher_stop() -> None:
    """Stop the refresher (tests); the next overview request starts it again."""
    global _refresher
    with _lock:
        refresher, _refresher = _refresher, None
    if refresher is not None:
        refresher.stopping = True
        refresher.wake.set()
        refresher.join(5.0)


# --- views of the index ---------------------------------------------------------------------

#: How a sort ranks a stream from its figures (None when not gathered yet: ranked last).
SortKey = Callable[[str, StreamSummary | None], tuple[object, ...]]
#: The sort keys by sort name, for now (``overview_page.overview_sort_keys``, looked up by
#: name: the overview page's module imports this one).
_KEYS_PATH = "dashboard.views.overview_page.overview_sort_keys"


@dataclass(frozen=True, slots=True)
class _Order:
    stamp: object
    names: tuple[str, ...]


#: Every indexed name in each order by figures, per (index, sort): sorted by the refresher
#: after a summary step (at most every ORDER_TTL_S), so a request never sorts 10,000
#: names; the first request for a sort sorts once if the refresher has not yet.
_full: dict[tuple[int, str], _Order] = {}
#: Filtered views of an order, per (index, filter, sort), valid while their order is.
_orders: OrderedDict[tuple[object, ...], _Order] = OrderedDict()
#: When each order by figures was last asked for: the refresher sorts only those.
_sorts_used: dict[str, float] = {}


def _sort_all(index: StreamIndex, sort: str) -> _Order:
    """Every name of ``index`` in the order ``sort``: O(n log n), off the request path."""
    keys: Callable[[], Mapping[str, SortKey]] = import_string(_KEYS_PATH)
    key = keys()[sort]
    snap = index.snapshot()
    figures = index.summaries()
    names = tuple(sorted(snap.names, key=lambda n: key(n, figures.get(n))))
    order = _Order((snap.generation, index.summaries_version), names)
    with _lock:
        _full[(id(index), sort)] = order
    return order


def orders_refresh(index: StreamIndex) -> None:
    """Sort again the orders by figures used within IDLE_STOP_S whose names or figures
    changed (the refresher, at most every ORDER_TTL_S)."""
    now = time.monotonic()
    stamp = (index.snapshot().generation, index.summaries_version)
    for sort, used in list(_sorts_used.items()):
        current = _full.get((id(index), sort))
        if now - used < IDLE_STOP_S and (current is None or current.stamp != stamp):
            _sort_all(index, sort)


def _ordered(index: StreamIndex, query: OverviewQuery) -> tuple[str, ...]:
    """The names of a view in order. By name: the index itself, filtered (cached per
    generation). By figures: the refresher's full order, filtered (cached per order)."""
    snap = index.snapshot()
    if query.sort == "name":
        if not query.q:
            return snap.names  # already sorted by name
        full = _Order(snap.generation, snap.names)
    else:
        _sorts_used[query.sort] = time.monotonic()
        found = _full.get((id(index), query.sort))
        refresher = _refresher
        if found is None or (
            # Without a refresher (tests that step the index) a request sorts again.
            (refresher is None or not refresher.is_alive())
            and found.stamp != (snap.generation, index.summaries_version)
        ):
            found = _sort_all(index, query.sort)
        full = found
        if not query.q:
            return full.names
    cache_key = (id(index), query.q, query.sort)
    with _lock:
        hit = _orders.get(cache_key)
        if hit is not None and hit.stamp == full.stamp:
            _orders.move_to_end(cache_key)
            return hit.names
    names = tuple(n for n in full.names if query.matches(n))
    with _lock:
        _orders[cache_key] = _Order(full.stamp, names)
        while len(_orders) > ORDER_CACHE_SIZE:
            _orders.popitem(last=False)
    return names


#: Views cut to a reach (``dashboard.access.scopes``), by view and reach: the names they
#: were cut from (the same tuple while the view's order is cached) and what is left.
_reached: OrderedDict[tuple[object, ...], tuple[tuple[str, ...], tuple[str, ...]]] = OrderedDict()


def _reach_cut(
    key: tuple[object, ...], names: tuple[str, ...], reach: tuple[str, ...]
) -> tuple[str, ...]:
    """``names`` a user with ``reach`` may read. Cached while ``names`` is the same tuple:
    at 10,000 streams the cut costs about a millisecond, paid once per index refresh."""
    with _lock:
        hit = _reached.get(key)
        if hit is not None and hit[0] is names:
            _reached.move_to_end(key)
            return hit[1]
    keep = reach_filter(reach)
    kept = names if keep is None else tuple(n for n in names if keep(n))
    with _lock:
        _reached[key] = (names, kept)
        while len(_reached) > ORDER_CACHE_SIZE:
            _reached.popitem(last=False)
    return kept


def reached_names(index: StreamIndex, reach: tuple[str, ...] | None) -> tuple[str, ...]:
    """The index's names ``reach`` lets a user read (None: all), in name order; cached
    while the names are the same, like a view's cut."""
    every = index.snapshot().names
    return every if reach is None else _reach_cut((id(index), "", "name", reach), every, reach)


def overview_page(
    *, index: StreamIndex, query: OverviewQuery, size: int, reach: tuple[str, ...] | None = None
) -> OverviewPage:
    """The names on the view's page (a page past the end shows the last one): no Redis,
    O(page) once its view is cached (see ``_ordered``). With ``reach``, only the streams
    it lets the user read, counted and paged as if there were no others."""
    names = _ordered(index, query)
    total = len(reached_names(index, reach))
    if reach is not None:
        names = _reach_cut((id(index), query.q, query.sort, reach), names, reach)
    pages = max(1, -(-len(names) // size))
    page = min(query.page, pages)
    start = (page - 1) * size
    return OverviewPage(
        names=names[start : start + size],
        page=page,
        pages=pages,
        matched=len(names),
        total=total,
        size=size,
    )
