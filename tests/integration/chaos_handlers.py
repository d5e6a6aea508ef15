"""The handler that ``tests/integration/test_chaos.py`` runs in ``manage.py queue_worker``.

A job's fate is in its payload, so the test knows the expected fate of every id:

- ``kind=ok``: succeeds on every delivery;
- ``kind=flaky``: fails while its delivery count is below ``succeed_at`` (2 or 3), then
  succeeds: a transient error that a later delivery gets past;
- ``kind=poison``: fails on every delivery, so it must end in the dead-letter stream.

Every run that reaches an outcome appends one line to ``runs-<pid>.log`` in
``CHAOS_SINK_DIR``: ``<ok|fail> <entry id> <delivery count> <consumer>``. The line is
written with one ``write(2)`` on an O_APPEND descriptor before the handler returns, so a
SIGKILL of the worker cannot lose a line whose handler returned (the kernel has it), and
the sink lives outside the Redis that the test kills: the outcome accounting never
depends on what is being killed. ``CHAOS_HANDLER_MS`` is the work each run pretends to do.
"""

from __future__ import annotations

import os
import threading
import time

from queue_core import Job

_lock = threading.Lock()
_fd: int | None = None


class TransientError(RuntimeError):
    """A failure that a later delivery gets past."""


class PoisonError(RuntimeError):
    """A failure on every delivery."""


def _sink() -> int:
    global _fd
    with _lock:
        if _fd is None:
            path = os.path.join(os.environ["CHAOS_SINK_DIR"], f"runs-{os.getpid()}.log")
            _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return _fd


def _record(outcome: str, job: Job) -> None:
    line = f"{outcome} {job.id} {job.delivery_count} {job.consumer}\n".encode()
    os.write(_sink(), line)


def handle(job: Job) -> None:
    time.sleep(float(os.environ.get("CHAOS_HANDLER_MS", "0")) / 1000)  # the job's work
    kind = job.fields.get("kind", "ok")
    if kind == "poison":
        _record("fail", job)
        raise PoisonError(f"job {job.fields.get('n')} always fails")
    if kind == "flaky" and job.delivery_count < int(job.fields["succeed_at"]):
        _record("fail", job)
        raise TransientError(f"job {job.fields.get('n')} failed on delivery {job.delivery_count}")
    _record("ok", job)
