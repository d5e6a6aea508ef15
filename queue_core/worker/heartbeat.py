"""The Worker's side of fleet control: it watches its group's pause and sends heartbeats.

Owns what the loop needs to honour a pause (``queue_core.control``): the last pause
read, whether it holds now (the key, and ``until_ms`` against this host's clock), when
to read it again (every ``PAUSE_CHECK_MS``), when to send the next heartbeat (every
``heartbeat_ms``, and at once when what the worker would report changes, so a pause is
confirmed within about a second), and what the heartbeat says. The loop decides what
to do with it: ``loop.Worker`` stops reading and sweeping while paused, cancels the
read in flight, and confirms once nothing is in flight. On a stop, after its last acks,
the loop sends one last heartbeat with ``stopped=True``: it carries ``stopped_ms``, so
readers count the worker gone at once instead of after ``HEARTBEAT_STALE_MS``. When that
write fails the loop logs a warning and exits as it would have; the heartbeat then goes
stale as a killed worker's does.

A pause check is one GET; a heartbeat is one pipeline (the GET, HSET and PEXPIRE, with
an HGETALL every 30 s to prune fields of workers gone for an hour). Both run on the
Worker's synchronous client in a thread, off the hot path: about 2.5 round trips a
second per worker, whatever its throughput. A Redis error is logged (once per outage)
and the next tick tries again; the last pause read stays in force meanwhile. Never
runs a handler, never acks.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket

import redis
from redis.exceptions import RedisClusterException

from queue_core.clock import now_ms
from queue_core.connection import Client
from queue_core.control import (
    HEARTBEAT_KEEP_MS,
    HEARTBEAT_PRUNE_EVERY_MS,
    UNREADABLE_PAUSE,
    Heartbeat,
    Pause,
    ackboard_version,
    heartbeat_send,
    pause_read,
)
from queue_core.events import event_publish
from queue_core.worker.config import WorkerConfig
from queue_core.worker.stats import WorkerStats

log = logging.getLogger("queue_core.worker")

#: The longest time between two reads of the pause: a pause is honoured within a second.
PAUSE_CHECK_MS = 500

#: What a heartbeat reports about the pause: (confirmed, the at_ms it confirms).
Report = tuple[bool, int | None]

#: Errors a pause check or heartbeat may meet; logged, then tried again next tick.
CONTROL_ERRORS = (redis.RedisError, RedisClusterException, OSError)


class ControlLink:
    """One worker's pause watch and heartbeat schedule. Times are ``time.monotonic()``."""

    def __init__(self, config: WorkerConfig, stats: WorkerStats) -> None:
        self._config = config
        self._stats = stats
        self.check_s = min(PAUSE_CHECK_MS, config.heartbeat_ms) / 1000
        self.beat_s = config.heartbeat_ms / 1000
        #: The pause as last read (None: not paused, or not read yet).
        self.pause: Pause | None = None
        #: Whether a pause check has completed (or failed): nothing is read before.
        self.checked = False
        #: What the last heartbeat written said; None before the first.
        self.reported: Report | None = None
        self.next_check = 0.0
        self.next_beat = 0.0
        self.next_prune = 0.0
        #: After a failed exchange, a changed report waits until then (no busy retry).
        self.retry_at = 0.0
        self._failing = False
        #: The exchange under way (the loop starts one at a time).
        self.task: asyncio.Task[None] | None = None
        self.started_ms = now_ms()
        self.host = socket.gethostname()
        self.pid = os.getpid()

    def paused(self, at_ms: int | None = None) -> bool:
        """Whether the pause holds now: read, and its auto-resume time not reached."""
        pause = self.pause
        if pause is None:
            return False
        return pause.until_ms is None or (now_ms() if at_ms is None else at_ms) < pause.until_ms

    def due(self, now: float, report: Report) -> bool:
        """Whether to read the pause (and maybe beat) now."""
        if now >= self.next_check or now >= self.next_beat:
            return True
        return report != self.reported and now >= self.retry_at

    def due_at(self) -> float:
        """When the next exchange is due; never while one is under way (its outcome moves
        the times on, and the loop is woken when it ends)."""
        if self.task is not None:
            return math.inf
        return min(self.next_check, self.next_beat)

    def resume_at(self, now: float) -> float | None:
        """None when not paused (reads and sweeps run); else when the pause ends by itself
        on this host's clock, as a ``time.monotonic()`` (infinity without an auto-resume
        time, or before the first pause check)."""
        if not self.checked:
            return math.inf
        pause = self.pause
        if pause is None:
            return None
        if pause.until_ms is None:
            return math.inf
        left_ms = pause.until_ms - now_ms()
        return None if left_ms <= 0 else now + left_ms / 1000

    def heartbeat(
        self, report: Report, *, running: int, buffered: int, stopped: bool = False
    ) -> Heartbeat:
        """What the worker reports now; ``stopped``: its last heartbeat, after its last
        acks (``stopped_ms`` is then its ``seen_ms``)."""
        config, stats = self._config, self._stats
        seen = now_ms()
        return Heartbeat(
            consumer=config.consumer, host=self.host, pid=self.pid, version=ackboard_version(),
            concurrency=config.concurrency, running=running, buffered=buffered,
            processed=stats.processed, failed=stats.failed, started_ms=self.started_ms,
            seen_ms=seen, paused=report[0], pause_at_ms=report[1],
            stopped_ms=seen if stopped else None,
        )  # fmt: skip

    def exchange(self, client: Client, beat: Heartbeat | None, *, prune: bool) -> Pause | None:
        """Blocking (run it in a thread): send ``beat`` if given, read the pause. Raises the
        Redis error; ``took``/``failed`` record the outcome."""
        config = self._config
        if beat is None:
            return pause_read(client=client, stream=config.stream, group=config.group)
        prune_before = beat.seen_ms - HEARTBEAT_KEEP_MS if prune else None
        pause = heartbeat_send(client=client, stream=config.stream, group=config.group,
                               beat=beat, prune_before_ms=prune_before)  # fmt: skip
        if beat.stopped:
            # A hint for open dashboard pages: the worker shows as stopped without a tick.
            event_publish(client=client, type="action", stream=config.stream,
                          group=config.group, ids=[], consumer=config.consumer,
                          action="worker-stopped")  # fmt: skip
        elif self.reported is not None and beat.paused != self.reported[0]:
            # A hint for open dashboard pages: "3 of 3 confirmed" shows without a tick.
            event_publish(client=client, type="action", stream=config.stream,
                          group=config.group, ids=[], consumer=config.consumer,
                          action="worker-paused" if beat.paused else "worker-resumed")  # fmt: skip
        return pause

    def took(self, pause: Pause | None, beat: Heartbeat | None, *, pruned: bool, at: float) -> None:
        """A successful exchange started at ``at``."""
        if self._failing:
            log.info("pause checks and heartbeats of %s reach Redis again", self._config.consumer)
            self._failing = False
        self._pause_seen(pause)
        self.pause = pause
        self.checked = True
        self.retry_at = 0.0
        self.next_check = at + self.check_s
        if beat is not None:
            self._report_seen(beat)
            self.reported = (beat.paused, beat.pause_at_ms)
            self.next_beat = at + self.beat_s
            if pruned:
                self.next_prune = at + HEARTBEAT_PRUNE_EVERY_MS / 1000

    def failed(self, exc: BaseException, *, at: float, unexpected: bool = False) -> None:
        """A failed exchange: log it once per outage (``unexpected``, not a Redis error:
        with its traceback); keep the pause in force; retry."""
        if not self._failing:
            log.warning("pause check / heartbeat of %s failed: %s; the last pause read "
                        "stays in force, retrying every %.1fs", self._config.consumer, exc,
                        self.check_s, exc_info=exc if unexpected else None)  # fmt: skip
            self._failing = True
        self.checked = True
        self.next_check = self.retry_at = at + self.check_s
        # A beat that was due is retried with the next check, not at once: an exchange that
        # fails at once (a refused connection, a reader's bug) would otherwise run every turn.
        self.next_beat = max(self.next_beat, self.next_check)

    def _pause_seen(self, pause: Pause | None) -> None:
        before = self.pause
        if pause == before:
            return
        config = self._config
        if pause == UNREADABLE_PAUSE:
            log.warning("group %s of %s: its pause key holds something that is not a readable "
                        "pause; treated as a pause (no new reads or sweeps) until it is "
                        "cleared", config.group, config.stream)  # fmt: skip
        elif pause is not None:
            until = "" if pause.until_ms is None else f", until {pause.until_ms} ms"
            log.info("group %s of %s paused by %s (%s%s): no new reads or sweeps; finishing "
                     "what this worker holds", config.group, config.stream, pause.by,
                     pause.reason, until)  # fmt: skip
        else:
            log.info("group %s of %s resumed", config.group, config.stream)

    def _report_seen(self, beat: Heartbeat) -> None:
        if self.reported is not None and beat.paused and not self.reported[0]:
            log.info("pause confirmed in the heartbeat (%d running, %d buffered)",
                     beat.running, beat.buffered)  # fmt: skip
