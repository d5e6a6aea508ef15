"""A worker fleet: N worker processes on one group, started, watched and stopped as one.

Owns supervising ``queue_worker`` *processes* (``manage.py queue_worker --processes N``):
starting one child per member, restarting a child that dies without being asked to, and
turning one stop signal into one graceful stop of every child. What a child does with a
stop request is ``stop.StopControl``'s rule, unchanged: the first request gives
in-flight handlers the whole grace period, and a copy of it within ``SAME_STOP_S`` is
the same request. The fleet keeps the same rule for itself: the first SIGTERM/SIGINT is
forwarded to every child at once, a copy within 1 s is dropped, and a later one is
forwarded as the "stop waiting for handlers" request.

Decisions, and why:

- **Each child is a whole ``queue_worker`` process** (its own interpreter, connections
  and consumer name), not a fork of the parent: a child is exactly the single worker the
  rest of the ack contract describes and tests, and N of them scale past one core.
- **Consumer names:** without ``--consumer`` each child chooses ``host-pid-random`` as
  a single worker does; with ``--consumer NAME`` member i is ``NAME-i`` (1 … N), and a
  restarted member keeps its name.
- **A child that dies unexpectedly is restarted, with backoff** (1 s doubling to 30 s,
  jittered; back to 1 s after a child stayed up 60 s), and the log says so. Stopping the
  whole fleet instead would turn one poisoned handler or OOM kill into a full outage,
  while nothing is lost either way: the dead child's entries stay pending and a live
  member's reclaim sweep takes them after ``min-idle-ms`` (§2.6). A restart after the
  stop request never happens.
- **Children run in their own session** with a parent-death signal (Linux): a Ctrl-C or
  a process-group signal reaches the parent, which forwards it once; a SIGKILLed parent
  still stops its children gracefully (they get SIGTERM).
- **Exit status:** 0 when every member's last process stopped cleanly once asked to;
  otherwise 1, and ``failures()`` names each member that did not. A child that the stop
  signal ended before it installed its own handlers (still importing: it had read
  nothing) counts as clean, as does one that ended in interpreter teardown on the
  deliberate second signal.

Never imports Django and never touches Redis: the children do. Costs one ``waitpid``
per child every 100 ms while running.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType

from queue_core.backoff import Backoff
from queue_core.worker.stop import SAME_STOP_S

log = logging.getLogger("queue_core.worker.fleet")

#: How often the parent checks its children and its signals.
POLL_S = 0.1
#: The first restart of a member waits 0.5-1 s; each crash in a row doubles it, up to 30 s.
RESTART_BASE_S = 1.0
RESTART_CAP_S = 30.0
#: A child that stayed up this long was healthy: its next crash starts the backoff over.
HEALTHY_AFTER_S = 60.0
#: prctl(2) option: the signal a child gets when the thread that forked it dies.
_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def die_with_parent() -> None:
    """``preexec_fn``: on Linux, SIGTERM this child when its parent dies, however it dies.

    Runs between fork and exec; it only calls prctl, so it is safe there. The signal is
    tied to the forking *thread*, so children are started from the main thread only.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def fleet_consumer_names(consumer: str, processes: int) -> list[str]:
    """Each member's ``--consumer``: ``NAME-1`` … ``NAME-N``, or "" (the child's default,
    ``host-pid-random``) when no name was given."""
    return [f"{consumer}-{i}" if consumer else "" for i in range(1, processes + 1)]


def exit_describe(status: int) -> str:
    """``exited with status 3`` or ``was killed by SIGKILL`` (a Popen returncode)."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"was killed by {name}"
    return f"exited with status {status}"


def _stopped_cleanly(status: int) -> bool:
    """After the fleet asked it to stop: a clean stop (see the module docstring)."""
    return status == 0 or any(status in (-sig, 128 + sig) for sig in _STOP_SIGNALS)


@dataclass
class _Member:
    """One slot of the fleet: its command line and its current (or last) process."""

    index: int
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    restart_at: float | None = None
    #: The last process's exit status, as Popen reports it (None: none exited yet).
    status: int | None = None
    #: What became of the last process, for the log and ``failures()``.
    outcome: str = "never started"
    backoff: Backoff = field(default_factory=lambda: Backoff(RESTART_BASE_S, RESTART_CAP_S))

    @property
    def label(self) -> str:
        return f"worker {self.index}"


class Fleet:
    """Run one child per command line in ``argvs`` until stopped; ``run()`` returns the exit
    status (0, or 1 with ``failures()`` saying which members did not stop cleanly).

    ``run()`` handles SIGTERM and SIGINT itself when called from the main thread;
    ``stop()`` is the same request from any thread.
    """

    def __init__(
        self,
        argvs: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        restart_base_s: float = RESTART_BASE_S,
        restart_cap_s: float = RESTART_CAP_S,
    ) -> None:
        if not argvs:
            raise ValueError("a fleet needs at least one command line")
        self.members = [
            _Member(i, list(argv), backoff=Backoff(restart_base_s, restart_cap_s))
            for i, argv in enumerate(argvs, start=1)
        ]
        self._env = dict(os.environ if env is None else env)
        self._cwd = cwd
        #: Stop requests (signal number, monotonic time), from signal handlers or stop().
        self._requests: queue.SimpleQueue[tuple[int, float]] = queue.SimpleQueue()
        self.stopping = False
        self._stop_at = 0.0

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Ask the fleet to stop, from any thread (a second call > 1 s later hurries it)."""
        self._requests.put((sig, time.monotonic()))

    def pids(self) -> list[int]:
        """The live children's process ids, in member order."""
        return [m.proc.pid for m in self.members if m.proc is not None]

    def failures(self) -> list[str]:
        """One line per member whose last process did not stop cleanly."""
        return [
            f"{m.label} {m.outcome}"
            for m in self.members
            if m.status is None or not _stopped_cleanly(m.status)
        ]

    # -- running -----------------------------------------------------------------------

    def run(self) -> int:
        """Start every member, supervise until stopped and every child exited; 0 or 1."""
        installed = self._signals_install()
        try:
            for member in self.members:
                self._spawn(member, time.monotonic())
            while not self._finished():
                self._requests_handle()
                now = time.monotonic()
                for member in self.members:
                    self._watch(member, now)
                if not self._finished():
                    time.sleep(POLL_S)
        finally:
            self._abandon()
            for sig, previous in installed.items():
                signal.signal(sig, previous)
        failed = self.failures()
        for line in failed:
            log.error("%s", line)
        return 1 if failed else 0

    def _signals_install(self) -> dict[int, signal._HANDLER]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            # SimpleQueue.put is safe in a signal handler; the loop does the rest.
            self._requests.put((signum, time.monotonic()))

        return {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}

    def _finished(self) -> bool:
        return self.stopping and all(m.proc is None for m in self.members)

    def _requests_handle(self) -> None:
        """Stop requests, by StopControl's rule: the first is forwarded to every child, a
        copy within SAME_STOP_S is dropped, a later one is forwarded as the hurry-up."""
        while True:
            try:
                sig, at = self._requests.get_nowait()
            except queue.Empty:
                return
            name = signal.Signals(sig).name
            if not self.stopping:
                self.stopping, self._stop_at = True, at
                log.info("%s: stopping %d workers; each finishes its in-flight handlers "
                         "within its grace period", name, len(self.pids()))  # fmt: skip
            elif at - self._stop_at < SAME_STOP_S:
                log.info("%s %.0f ms after the stop request: taken as the same request",
                         name, (at - self._stop_at) * 1000)  # fmt: skip
                continue
            else:
                log.warning("second stop request (%s): workers stop waiting for in-flight "
                            "handlers", name)  # fmt: skip
            for member in self.members:
                if member.proc is not None and member.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        member.proc.send_signal(sig)

    def _spawn(self, member: _Member, now: float) -> None:
        member.restart_at = None
        try:
            member.proc = subprocess.Popen(
                member.argv,
                env=self._env,
                cwd=self._cwd,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        except OSError as exc:
            member.proc, member.status = None, None
            member.outcome = f"could not be started ({exc})"
            self._restart_schedule(member, now)
            return
        member.started_at = now
        log.info("%s started (pid %d)", member.label, member.proc.pid)

    def _watch(self, member: _Member, now: float) -> None:
        """Reap an exited child; restart it (after its backoff) unless the fleet is stopping."""
        if member.proc is None:
            if member.restart_at is not None and not self.stopping and now >= member.restart_at:
                member.restarts += 1
                self._spawn(member, now)
            return
        status = member.proc.poll()
        if status is None:
            return
        member.status = status
        member.outcome = f"(pid {member.proc.pid}) {exit_describe(status)}"
        member.proc = None
        if self.stopping:
            if _stopped_cleanly(status):
                log.info("%s %s: stopped", member.label, member.outcome)
            return
        if now - member.started_at >= HEALTHY_AFTER_S:
            member.backoff.succeeded()
        self._restart_schedule(member, now)

    def _restart_schedule(self, member: _Member, now: float) -> None:
        delay = member.backoff.failed()
        member.restart_at = now + delay
        log.warning("%s %s without a stop request; restarting it in %.1f s (restart %d); "
                    "its pending entries are reclaimed after min-idle",
                    member.label, member.outcome, delay, member.restarts + 1)  # fmt: skip

    def _abandon(self) -> None:
        """Only on an error in the parent itself: stop the children still running, and
        reap them, rather than leave them unsupervised."""
        alive = [m for m in self.members if m.proc is not None and m.proc.poll() is None]
        for member in alive:
            assert member.proc is not None
            with contextlib.suppress(ProcessLookupError):
                member.proc.send_signal(signal.SIGTERM)
        for member in alive:
            assert member.proc is not None
            member.status = member.proc.wait()
            member.outcome = f"(pid {member.proc.pid}) {exit_describe(member.status)}"
            member.proc = None
