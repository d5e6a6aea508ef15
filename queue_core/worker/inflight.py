"""Read-ahead and in-flight accounting: how many entries the Worker holds, and in what bites.

Owns the Worker's pacing, from the measured time per handler call: how many entries to
hold (running plus waiting for a lane) so lanes stay busy while none waits long enough
for another worker to reclaim it; how many to read next; how to cut waiting jobs into
chunks for the lanes. Pure bookkeeping: never talks to Redis, never runs a handler.
Cost: a few integer operations per read and per chunk.
"""

from __future__ import annotations

from collections import deque

from queue_core.jobs import Job
from queue_core.worker.lanes import Chunk

#: How long one chunk of handler calls should take: long enough to amortise a thread hop
#: (~30 µs), short enough that acks stay prompt and lanes stay balanced.
CHUNK_BUDGET_S = 0.005


class InFlight:
    """Entries this worker holds: ``waiting`` for a lane, or running in ``chunks``."""

    def __init__(self, *, concurrency: int, batch: int, min_idle_ms: int) -> None:
        self.concurrency = concurrency
        self.batch = batch
        # How long an entry may wait in our hands before a lane starts it; well below
        # min-idle, or other workers would reclaim entries we are about to run.
        self.hold_budget_s = max(0.005, min(1.0, min_idle_ms / 10_000))
        #: Measured seconds per handler call (moving average); None before the first chunk.
        self.avg: float | None = None
        self.waiting: deque[Job] = deque()
        self.running = 0
        self.free_lanes = concurrency
        self.chunks: set[Chunk] = set()

    def target(self) -> int:
        """How many entries to hold (running + waiting): enough to keep lanes busy and read
        ahead, few enough that none waits longer than the hold budget (from measured speed)."""
        if self.avg is None:
            return self.concurrency
        by_time = int(self.concurrency * self.hold_budget_s / max(self.avg, 1e-7))
        return max(self.concurrency, min(2 * self.batch, by_time))

    def read_count(self, unsettled: int) -> int:
        """How many entries to read now; 0 to wait.

        Failed attempts still to be written (``unsettled``) count as held: when every
        handler fails (a downstream outage), reading on would outrun the failure log
        without bound, each waiting entry holding its exception and traceback in memory.
        """
        held = len(self.waiting) + self.running + unsettled
        target = self.target()
        deficit = target - held
        if deficit <= 0:
            return 0
        if held and deficit < max(1, min(self.batch, target) // 2):
            return 0  # read in big bites, not one entry per finished handler
        return min(self.batch, deficit)

    def chunk_take(self) -> Chunk | None:
        """The next chunk for a free lane (None when no lane is free or nothing waits)."""
        if not self.waiting or self.free_lanes <= 0:
            return None
        cap = 1 if self.avg is None else max(1, int(CHUNK_BUDGET_S / max(self.avg, 1e-7)))
        size = min(cap, -(-len(self.waiting) // self.free_lanes))
        if size >= len(self.waiting):
            jobs = list(self.waiting)
            self.waiting.clear()
        else:
            jobs = [self.waiting.popleft() for _ in range(size)]
        chunk = Chunk(jobs)
        self.free_lanes -= 1
        self.running += len(jobs)
        self.chunks.add(chunk)
        return chunk

    def chunk_done(self, chunk: Chunk) -> bool:
        """Free the chunk's lane and learn its speed; False when it was settled already."""
        if chunk not in self.chunks:
            return False  # settled at shutdown already
        self.chunks.discard(chunk)
        self.free_lanes += 1
        self.running -= len(chunk.jobs)
        if chunk.jobs and chunk.elapsed > 0 and not chunk.abandoned:
            per_job = chunk.elapsed / len(chunk.jobs)
            self.avg = per_job if self.avg is None else 0.8 * self.avg + 0.2 * per_job
        return True

    def ids(self) -> set[str]:
        """Ids waiting or running. O(held)."""
        held = {job.id for job in self.waiting}
        for chunk in self.chunks:
            held.update(job.id for job in chunk.jobs)
        return held
