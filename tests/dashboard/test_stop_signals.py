"""``dashboard.runtime.stop_signals``: a stop signal sets the event even when it lands while the
main thread holds that event's lock, which is where a handler calling ``Event.set``
itself blocks forever (``manage.py run_jobs`` ignored SIGTERM that way)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: A child that receives SIGTERM while its main thread holds the event's lock, as
#: ``Event.wait`` does between its timed waits, then waits for the event.
_CHILD = """
import os, signal, sys, threading, time
{install}
event = threading.Event()
install(event)
with event._cond:  # Event.wait holds this (a plain Lock) between its timed waits
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)  # the handler runs here, in this thread, with the lock held
print("set" if event.wait(5) else "not set", flush=True)
"""
HELPER = "from dashboard.runtime.stop_signals import set_on_signals as install"
#: What the commands did before: the handler sets the event itself.
DIRECT = "def install(event):\n    signal.signal(signal.SIGTERM, lambda signum, frame: event.set())"


def _run(install: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
    code = textwrap.dedent(_CHILD).format(install=install)
    try:
        return subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None  # deadlocked


def test_a_signal_landing_while_the_lock_is_held_still_sets_the_event() -> None:
    done = _run(HELPER, timeout=15)
    assert done is not None, "the child deadlocked"
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "set"


def test_the_direct_handler_it_replaces_deadlocks_there() -> None:
    """The hazard is real (so the test above can fail): a handler that sets the event
    itself never returns."""
    assert _run(DIRECT, timeout=4) is None  # the child answers in ~0.3 s when it can


def test_every_signal_runs_the_callback() -> None:
    code = textwrap.dedent(
        """
        import os, signal, threading
        from dashboard.runtime.stop_signals import call_on_signals
        seen, done = [], threading.Event()
        def callback(signum):
            seen.append(signum)
            if len(seen) == 2:
                done.set()
        call_on_signals(callback)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        assert done.wait(5), seen
        print(sorted(seen) == sorted([signal.SIGINT, signal.SIGTERM]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=15
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
