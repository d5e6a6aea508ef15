"""The stop rule's signals (``queue_core.worker.stop.StopControl``), in this process.

A worker stopped by a signal keeps ignoring stop signals once its loop's handlers are
gone: under ``uv run`` the forwarded copy of a last Ctrl-C can arrive after the loop
ended, where Python's default handler would raise KeyboardInterrupt in the shutdown.
The end-to-end case (``uv run``, a process group, two Ctrl-Cs) is in
tests/integration/test_worker_cli.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import pytest

from queue_core.worker.stop import StopControl
from tests.waiting import wait_until_async


@pytest.fixture
def saved_handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _control(loop: asyncio.AbstractEventLoop) -> StopControl:
    control = StopControl(grace_seconds=1.0, wake=lambda: None)
    control.attach(loop)
    return control


@pytest.mark.usefixtures("saved_handlers")
class StopSignalTests:
    def test_after_a_stop_by_signal_late_copies_are_ignored(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            control = _control(loop)
            installed = control.signals_install(loop)
            assert set(installed) == {signal.SIGINT, signal.SIGTERM}
            os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C
            # The handler runs in the loop: run it until the signal has been handled.
            loop.run_until_complete(
                wait_until_async(lambda: control.stopping, 5, "the signal to be handled")
            )
            assert control.stopping and control.signalled
            control.signals_remove(loop, installed)
        finally:
            loop.close()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        # The forwarded copy, after the loop is gone: no KeyboardInterrupt.
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)

    def test_without_a_signal_python_s_defaults_come_back(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # whatever was there before (xdist's)
        loop = asyncio.new_event_loop()
        try:
            control = _control(loop)
            installed = control.signals_install(loop)
            control.request()  # Worker.stop(), or a drained stream: no signal
            control.signals_remove(loop, installed)
        finally:
            loop.close()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
