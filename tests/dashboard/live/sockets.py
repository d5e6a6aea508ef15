"""Test sockets through the real ASGI application (origin check, session auth, routing)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import redis
from channels.testing import WebsocketCommunicator

from dashboard.asgi import application
from queue_core.keys import EVENTS_CHANNEL
from tests.waiting import wait_until_async

CookieFor = Callable[..., Awaitable[list[tuple[bytes, bytes]]]]
#: What a page of the test site sends on a handshake: its Host and its own Origin.
SITE_HEADERS = [(b"host", b"testserver"), (b"origin", b"http://testserver")]


class LiveSocket(WebsocketCommunicator):
    """A test socket whose handshake may take up to 10 s, not channels' default 1 s: the
    handshake reads the session and permissions in a database thread, which on a loaded
    2-core CI machine can take over a second. A refusal still answers at once."""

    async def connect(self, timeout: float = 10) -> tuple[bool, int | str | None]:
        result: tuple[bool, int | str | None] = await super().connect(timeout)
        return result


def live_socket(path: str, headers: list[tuple[bytes, bytes]]) -> WebsocketCommunicator:
    return LiveSocket(application, path, headers=headers)


async def receive_until(
    ws: WebsocketCommunicator, predicate: Callable[[str], bool], timeout: float = 3.0
) -> str:
    """Messages until one satisfies ``predicate``; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            message: str = await ws.receive_from(timeout=left)
        except TimeoutError:
            break
        if predicate(message):
            return message
        seen.append(message[:200])
    raise AssertionError(f"no matching push within {timeout}s; got {seen}")


async def close_code(ws: WebsocketCommunicator) -> int | None:
    """The code a refused socket was closed with (None: the handshake itself was refused)."""
    connected, _ = await ws.connect()
    if not connected:
        return None
    message = await ws.receive_output(timeout=10)
    assert message["type"] == "websocket.close", "nothing is sent before the close"
    code: int = message["code"]
    return code


async def events_subscribed(r: redis.Redis) -> None:
    """Until the broadcaster listens on the events channel (PUBSUB NUMSUB on the server):
    an event published before that is heard by no one."""
    await wait_until_async(
        lambda: r.pubsub_numsub(EVENTS_CHANNEL)[0][1] >= 1,
        what="the broadcaster's subscription to the events channel",
    )


async def xread_blocked(r: redis.Redis) -> None:
    """Until a client of ``r``'s server waits in a blocking XREAD (CLIENT LIST): the
    broadcaster's watcher, once a socket opened a surface (with none open it reads
    nothing), is blocked on the streams' last ids, so the next XADD wakes it."""

    def blocked() -> bool:
        clients: list[dict[str, str]] = r.client_list()
        return any(c.get("cmd") == "xread" and "b" in c.get("flags", "") for c in clients)

    await wait_until_async(blocked, what="the watcher's blocking XREAD")
