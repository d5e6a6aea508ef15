"""The stream index: the visible stream names and their last overview figures, kept warm.

Owns a sorted list of the stream names the allowlist lets the dashboard see (companions
left out, ``keys.stream_visible``) and a table of each one's last ``StreamSummary``, both
refreshed in bounded steps, so that a page request never SCANs the keyspace and never
summarizes every stream. A request reads a snapshot (a tuple, no Redis) and then reads
only the rows it shows (``selectors.stream_summaries`` of one page).

It never imports Django and never writes to Redis. One refresher thread calls ``step``;
any thread may read (``snapshot``, ``summaries``) or hand back fresher figures
(``remember``). A lock guards the swaps; readers get immutable copies.

Cost of one ``step`` (the unit of work the refresher does, then pauses):

- while a discovery pass runs: one ``SCAN cursor [MATCH p] COUNT scan_count TYPE stream``
  per primary that has not finished, each O(scan_count) keys examined on the server,
  whatever the size of the keyspace. One pass is ceil(keys / scan_count) steps per primary
  (on a Redis Cluster every primary is scanned with its own cursor, in the same step).
  With one allowlist pattern SCAN gets it as MATCH; with several, one SCAN of the keyspace
  without MATCH is filtered here (k patterns never cost k passes).
- while a summary round runs: ``selectors.stream_summaries`` of the next ``batch`` names,
  two pipelined round trips, O(batch + their groups + consumers). Rounds run only while
  the caller asks for figures (``step(figures=True)``): at 10,000 streams a round is 100
  such steps, about 1.5 s of Python, which a web process should not spend when nobody
  orders by figures.

A pass and a round each start at most once every ``refresh_s``. Names found during a pass
join the list at once; names gone at the end of a pass (deleted streams) leave it then.
So a new stream appears within one pass, and the figures used for *ordering* are at most
one round old (``summaries_age``); the rows a page shows are read fresh.

Several web processes each hold their own index (a few hundred KB at 10,000 names); they
refresh independently, so two tabs on two processes may see a new stream a pass apart.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from redis.cluster import RedisCluster

from queue_core import selectors
from queue_core.clock import now_s
from queue_core.connection import Client
from queue_core.keys import allowed, stream_visible
from queue_core.types import StreamSummary

#: Keys one SCAN call examines (per primary, per step).
SCAN_STEP_COUNT = 1_000
#: Streams one summary step reads (two pipelined round trips).
SUMMARY_BATCH = 100
#: Seconds between the starts of two discovery passes (and of two summary rounds).
REFRESH_S = 10.0


@dataclass(frozen=True, slots=True)
class IndexSnapshot:
    """The names as of now: sorted, immutable, with how fresh they are.

    ``generation`` changes whenever ``names`` does. ``refreshed_at`` is the wall-clock time
    (``queue_core.clock.now_s()``) at which the last *complete* pass started, None before
    the first one completes. ``truncated`` is True when the safety cap stopped the last pass.
    """

    names: tuple[str, ...]
    generation: int
    refreshed_at: float | None
    scanning: bool
    truncated: bool
    cap: int
    companions: int


@dataclass(frozen=True, slots=True)
class StepReport:
    """What one ``step`` did, for the refresher (and tests)."""

    scans: int
    summarized: int
    busy: bool  # a pass or a round is still under way: step again after a short pause


@dataclass(slots=True)
class _Pass:
    """A discovery pass under way: a cursor per scan target, the names seen so far."""

    started: float
    cursors: dict[Any, int]
    found: set[str]
    companions: int = 0
    truncated: bool = False


def _targets(client: Client) -> list[Any]:
    """What to SCAN: every primary of a cluster (by node name), else the one server."""
    if isinstance(client, RedisCluster):
        return [node.name for node in client.get_primaries()]  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
    return [None]


def _scan(
    client: Client, target: Any, cursor: int, match: str | None, count: int
) -> tuple[int, list[Any]]:
    """One SCAN call on ``target`` (None: the one server): (next cursor, keys)."""
    if target is None:
        assert not isinstance(client, RedisCluster)
        next_cursor, keys = client.scan(cursor=cursor, match=match, count=count, _type="stream")
        return int(next_cursor), list(keys)
    assert isinstance(client, RedisCluster)
    node = client.get_node(node_name=target)  # type: ignore[no-untyped-call]  # untyped in redis-py
    if node is None:
        raise LookupError(f"cluster node {target} is gone")
    # A cluster's SCAN answers ({node name: cursor}, keys); redis-py types it as one server's.
    reply: Any = client.scan(
        cursor=cursor, match=match, count=count, _type="stream", target_nodes=node
    )
    cursors, keys = reply
    return int(cursors[target]), list(keys)


class StreamIndex:
    """See the module docstring. ``clock`` is wall-clock seconds (tests pass their own)."""

    def __init__(
        self,
        *,
        patterns: Iterable[str],
        cap: int,
        scan_count: int = SCAN_STEP_COUNT,
        batch: int = SUMMARY_BATCH,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = now_s,
    ) -> None:
        self.patterns = tuple(patterns)
        self.cap = cap
        self.scan_count = scan_count
        self.batch = batch
        self.refresh_s = refresh_s
        self._clock = clock
        self._match = self.patterns[0] if len(self.patterns) == 1 else None
        self._lock = threading.Lock()
        self._step_lock = threading.Lock()
        self._names: list[str] = []
        self._names_snapshot: tuple[str, ...] = ()
        self._generation = 0
        self._refreshed_at: float | None = None
        self._truncated = False
        self._companions = 0
        self._pass: _Pass | None = None
        self._last_pass_started: float | None = None
        self._summaries: dict[str, tuple[StreamSummary, float]] = {}
        self._summaries_version = 0
        self._round_started: float | None = None
        self._round_after: str | None = None  # the last name of the round's last batch
        self._last_round_started: float | None = None
        self._round_saw_all = False

    # --- reading --------------------------------------------------------------------------

    def snapshot(self) -> IndexSnapshot:
        """The names now: O(1) (the tuple is rebuilt only when the names change)."""
        with self._lock:
            return IndexSnapshot(
                names=self._names_snapshot,
                generation=self._generation,
                refreshed_at=self._refreshed_at,
                scanning=self._pass is not None,
                truncated=self._truncated,
                cap=self.cap,
                companions=self._companions,
            )

    @property
    def ready(self) -> bool:
        """Whether one discovery pass has completed."""
        return self._refreshed_at is not None

    def summary(self, name: str) -> StreamSummary | None:
        got = self._summaries.get(name)
        return got[0] if got else None

    def summaries(self) -> dict[str, StreamSummary]:
        """A copy of the figures table: O(streams), for ordering (cache its result)."""
        with self._lock:
            return {name: got[0] for name, got in self._summaries.items()}

    @property
    def summaries_version(self) -> int:
        return self._summaries_version

    def summaries_age(self) -> float | None:
        """Seconds since the last complete summary round started (every figure is at least
        that fresh), None before one completes."""
        if self._last_round_started is None:
            return None
        return max(0.0, self._clock() - self._last_round_started)

    def summarized(self) -> int:
        return len(self._summaries)

    # --- writing back -----------------------------------------------------------------------

    def remember(self, summaries: Iterable[StreamSummary]) -> None:
        """Figures a page just read fresh: kept, so the ordering is freshest where people look."""
        now = self._clock()
        with self._lock:
            for s in summaries:
                if s.name in self._summaries or self._has(s.name):
                    self._summaries[s.name] = (s, now)
            self._summaries_version += 1

    def learn(self, name: str) -> None:
        """A stream heard of outside SCAN (an event naming it): listed now if visible."""
        if not stream_visible(name, self.patterns):
            return
        with self._lock:
            self._add(name)

    # --- refreshing ------------------------------------------------------------------------

    def due(self, *, figures: bool = True) -> bool:
        """Whether ``step`` has work now (a pass or round under way, or one is due)."""
        now = self._clock()
        names_due = (
            self._pass is not None
            or self._last_pass_started is None
            or now - self._last_pass_started >= self.refresh_s
        )
        figures_due = figures and (
            self._round_started is not None
            or self._last_round_started is None
            or now - self._last_round_started >= self.refresh_s
        )
        return names_due or figures_due

    def step(self, *, client: Client, figures: bool = True) -> StepReport:
        """One bounded unit of refresh work (see the module docstring for its cost). One
        caller at a time (the refresher, or a request building the index). Without
        ``figures`` only the names are refreshed: no summary round starts or goes on (an
        overview sorted by name and no /metrics above the fresh limit need none)."""
        with self._step_lock:
            return self._step(client, figures)

    def _step(self, client: Client, figures: bool) -> StepReport:
        now = self._clock()
        scans = 0
        if self._pass is None and (
            self._last_pass_started is None or now - self._last_pass_started >= self.refresh_s
        ):
            self._pass = _Pass(started=now, cursors=dict.fromkeys(_targets(client), 0), found=set())
            self._last_pass_started = now
        if self._pass is not None:
            scans = self._scan_step(client, self._pass)
        summarized = 0
        if (
            figures
            and self._round_started is None
            and self._names
            and (
                self._last_round_started is None or now - self._last_round_started >= self.refresh_s
            )
        ):
            self._round_started, self._round_after = now, None
            self._round_saw_all = self.ready  # False: the first pass was still finding names
        if figures and self._round_started is not None:
            summarized = self._summary_step(client)
        # A round is also due at once when the last pass found names the round missed.
        round_due = self._round_started is not None or (
            bool(self._names) and self._last_round_started is None
        )
        busy = self._pass is not None or (figures and round_due)
        return StepReport(scans=scans, summarized=summarized, busy=busy)

    def _scan_step(self, client: Client, scan: _Pass) -> int:
        calls = 0
        for target, cursor in list(scan.cursors.items()):
            try:
                next_cursor, keys = _scan(client, target, cursor, self._match, self.scan_count)
            except LookupError:
                self._pass = None  # the topology changed: the next step starts afresh
                self._last_pass_started = None
                return calls
            calls += 1
            self._take(scan, keys)
            if next_cursor == 0:
                del scan.cursors[target]
            else:
                scan.cursors[target] = next_cursor
        if not scan.cursors:
            self._finish(scan)
        return calls

    def _take(self, scan: _Pass, keys: list[Any]) -> None:
        """Names of one SCAN reply: visible ones join the list at once (up to the cap)."""
        for raw in keys:
            try:
                name = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            except UnicodeDecodeError:
                continue  # the dashboard cannot address it
            if name in scan.found or not allowed(name, self.patterns):
                continue
            if not stream_visible(name, self.patterns):
                scan.companions += 1
                continue
            if len(scan.found) >= self.cap:
                scan.truncated = True
                continue
            scan.found.add(name)
            with self._lock:
                self._add(name)

    def _finish(self, scan: _Pass) -> None:
        """The pass is complete: names it did not see (deleted streams) leave the list."""
        with self._lock:
            names = sorted(scan.found)
            if names != self._names:
                self._names = names
                self._names_snapshot = tuple(names)
                self._generation += 1
            gone = self._summaries.keys() - scan.found
            for name in gone:
                del self._summaries[name]
            self._refreshed_at = scan.started
            self._truncated = scan.truncated
            self._companions = scan.companions
            self._pass = None
            if self._round_started is None and len(self._summaries) < len(self._names):
                # Names the pass found after the round had gone by: one more round now.
                self._last_round_started = None

    def _has(self, name: str) -> bool:
        at = bisect.bisect_left(self._names, name)
        return at < len(self._names) and self._names[at] == name

    def _add(self, name: str) -> None:
        """Insert ``name`` (lock held): O(streams) for the copy, only when it is new."""
        at = bisect.bisect_left(self._names, name)
        if at < len(self._names) and self._names[at] == name:
            return
        if len(self._names) >= self.cap:
            self._truncated = True
            return
        self._names.insert(at, name)
        self._names_snapshot = tuple(self._names)
        self._generation += 1

    def _summary_step(self, client: Client) -> int:
        with self._lock:
            start = 0
            if self._round_after is not None:
                start = bisect.bisect_right(self._names, self._round_after)
            batch = self._names[start : start + self.batch]
        if not batch:
            self._end_round()
            return 0
        got = selectors.stream_summaries(client=client, streams=batch)
        now = self._clock()
        with self._lock:
            for s in got:
                self._summaries[s.name] = (s, now)
            for name in set(batch) - {s.name for s in got}:
                self._summaries.pop(name, None)  # deleted since discovery
            self._summaries_version += 1
            self._round_after = batch[-1]
        if len(batch) < self.batch:
            self._end_round()
        return len(batch)

    def _end_round(self) -> None:
        self._last_round_started = self._round_started
        self._round_started = None
        self._round_after = None
        if not self._round_saw_all and self.ready and len(self._summaries) < len(self._names):
            # Names the first pass found behind the round's cursor: one more round now.
            self._last_round_started = None

    def build(self, *, client: Client, budget_s: float, figures: bool = True) -> bool:
        """Steps until the pass (and with ``figures`` the summary round) under way is done
        or ``budget_s`` is spent: the first request of a process, which finds no index.
        True when done."""
        deadline = time.monotonic() + budget_s
        while True:
            if not self.step(client=client, figures=figures).busy:
                return True
            if time.monotonic() >= deadline:
                return False
