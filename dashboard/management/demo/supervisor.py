"""Child processes of the demo: start each in its own process group, stop them all.

Each child gets its own session (so the terminal's Ctrl-C reaches only the demo, which
then stops the children in order) and, on Linux, a parent-death signal (so even a
SIGKILLed demo leaves nothing running). Output goes to one log file per child.

This module never touches Redis or the database.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

# The parent-death signal is the worker fleet's; the demo's children die with it the same way.
from queue_core.worker.fleet import die_with_parent as die_with_parent


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid``; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    #: Set when the demo killed it on purpose, so its exit is not reported as a crash.
    killed: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class Supervisor:
    """Starts children with one environment and log dir, and stops every one of them."""

    env: Mapping[str, str]
    log_dir: Path
    cwd: Path
    children: list[Child] = field(default_factory=list)

    def start(self, name: str, argv: Sequence[str]) -> Child:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log_file = log_path.open("wb")
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=self.cwd,
                env=dict(self.env),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        except BaseException:
            log_file.close()
            raise
        child = Child(name=name, proc=proc, log_path=log_path, log_file=log_file)
        self.children.append(child)
        return child

    def kill(self, child: Child) -> None:
        """SIGKILL one child's group on purpose (the demo's dying consumer) and reap it."""
        child.killed = True
        signal_group(child.pid, signal.SIGKILL)
        child.proc.wait()

    def crashed(self) -> list[Child]:
        """Children that exited without being asked to."""
        return [c for c in self.children if not c.killed and c.proc.poll() is not None]

    def stop(self, names: Sequence[str] | None = None, *, timeout: float = 10.0) -> None:
        """SIGTERM the named children (all by default) at once, wait, then SIGKILL the rest.

        Each child's whole group is signalled, so anything it spawned goes too. Every
        child is reaped before this returns, so none is left as a zombie.
        """
        chosen = [c for c in self.children if names is None or c.name in names]
        for child in chosen:
            if child.proc.poll() is None:
                signal_group(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in chosen:
            try:
                child.proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                signal_group(child.pid, signal.SIGKILL)
                child.proc.wait()
            # Even after a clean exit, something the child spawned may linger in its group.
            signal_group(child.pid, signal.SIGKILL)
            child.log_file.close()
