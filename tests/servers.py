"""The one shape of a private test server's life: start it, hand it over, always clean it
up. A server that cannot start fails the test with how to get one; it never skips."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol, TypeVar

import pytest


class Startable(Protocol):
    def start(self) -> Any: ...
    def cleanup(self) -> None: ...


S = TypeVar("S", bound=Startable)


@contextlib.contextmanager
def started(server: S, *unavailable: type[Exception]) -> Iterator[S]:
    """``server``, started; ``unavailable`` are the errors that mean "cannot start here"
    (their message says how to get one)."""
    try:
        try:
            server.start()
        except unavailable as exc:
            pytest.fail(str(exc), pytrace=False)
        yield server
    finally:
        server.cleanup()
