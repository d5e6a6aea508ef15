"""The WebSocket consumer of every live surface. It only ever sends; it never writes.

One consumer class serves each kind in ``registry.KINDS`` (its route passes the kind).
It checks the login and ``dashboard.view_queues`` in ``connect`` (closing the socket
otherwise), joins the channels group of its surface and permission set, and forwards
``surface.update`` events (rendered partials) to the browser. It never talks to Redis for
them: the process's one broadcaster (``dashboard.live.broadcaster``) polls and renders for
every socket and delivers through the in-process "default" layer, so Redis load does not
grow with the number of tabs and a Redis restart cannot cut a socket off.

Authorization lasts only as long as the session and its permissions do
(``dashboard.live.session`` holds the rules):

- every ``ACKBOARD_LIVE_RECHECK`` seconds (2) the socket reads its session again (a few
  indexed SQL queries in a thread, no Redis). A session that ended or expired, a changed
  password or a deactivated user closes it with 4401, a lost ``view_queues`` with 4403,
  and a changed permission set moves it to that set's rendering at once (so the buttons
  pushed match the user's rights);
- a logout also sends a notice on the "shared" layer, which closes that session's sockets
  at once. The notice is the fast path and the recheck the guarantee: if Redis is away,
  sockets close at the next recheck.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import redis
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import Error as DatabaseError

from dashboard.live.broadcaster import get_broadcaster
from dashboard.live.logs import socket_warnings
from dashboard.live.registry import Perms, Surface, surface_from_route
from dashboard.live.session import (
    CLOSE_LOGIN,
    NOTICE_TIMEOUT_S,
    SESSION_ENDED,
    session_group,
    session_perms,
    shared_layer,
    user_perms,
)
from queue_core.backoff import Backoff

log = logging.getLogger("ackboard.live")

#: Not a live page (a hidden stream, a companion, a name or id the page refuses).
CLOSE_NOT_FOUND = 4404
#: "Try again later": the session could not be read for a while (database unreachable).
#: The ws extension reconnects after it, and ``connect`` checks everything afresh.
CLOSE_RETRY = 1013
#: "Internal error": the ws extension reconnects after it too.
CLOSE_ERROR = 1011
#: Rechecks in a row that may fail to read the session before the socket is closed.
UNVERIFIED_LIMIT = 5
#: Layers forget a group member after their group_expiry (a day by default): a socket
#: joins its groups again this often, so a tab open for days keeps its pushes.
REJOIN_S = 3600.0


class SurfaceConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """A socket on one live surface; its route says which kind (``as_asgi(kind=…)``)."""

    kind: str = ""
    live_group: str = ""
    attached: tuple[Surface, Perms] | None = None
    session_key: str = ""
    user_id: Any = None
    #: Set once the server closed the socket: nothing is sent after that.
    ended: bool = False
    watchers: tuple[asyncio.Task[None], ...] = ()

    def __init__(self, *args: Any, kind: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind

    async def connect(self) -> None:
        user = self.scope.get("user")
        perms = await user_perms(user)
        surface = surface_from_route(self.kind, self.scope["url_route"]["kwargs"])
        session_key = getattr(self.scope.get("session"), "session_key", None)
        if not isinstance(perms, int) and not session_key:
            perms = CLOSE_LOGIN  # no session to follow, so nothing could end this socket
        if isinstance(perms, int) or surface is None:
            # Accept only to close with a reason: a refused handshake looks like a network
            # failure to the browser (1006), which the ws extension would retry forever.
            # Nothing is sent before the close.
            await self.accept()
            await self.close(code=perms if isinstance(perms, int) else CLOSE_NOT_FOUND)
            return
        assert user is not None and session_key
        self.session_key, self.user_id = session_key, user.pk
        await self.accept()
        await self._attach(surface, perms)
        loop = asyncio.get_running_loop()
        self.watchers = (
            loop.create_task(self._recheck(), name="ackboard-live-recheck"),
            loop.create_task(self._hear_notices(), name="ackboard-live-notices"),
        )

    async def disconnect(self, code: int) -> None:
        self.ended = True
        for task in self.watchers:
            task.cancel()
        for task in self.watchers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.watchers = ()
        await self._detach()

    async def surface_update(self, event: dict[str, Any]) -> None:
        """Rendered partials for this surface: root elements whose ids the page swaps."""
        await self._push(event["html"])

    async def _push(self, html: str) -> None:
        """Send a push unless the socket ended. A tab that navigates away closes its socket
        before the server hears the disconnect; daphne then refuses the send with a
        RuntimeError ("Attempt to send on a closed protocol"). That is the end of this
        socket, not an error of the application: nothing is logged, nothing more is sent."""
        if self.ended:
            return
        try:
            await self.send(text_data=html)
        except RuntimeError:
            self.ended = True

    # --- the surface's rendering --------------------------------------------------------

    async def _attach(self, surface: Surface, perms: Perms) -> None:
        broadcaster = get_broadcaster()
        self.live_group = broadcaster.group_name(surface, perms)
        await self.channel_layer.group_add(self.live_group, self.channel_name)
        self.attached = (surface, perms)
        # The last rendered state, from memory: a reconnecting tab catches up on what it
        # missed without a Redis command. The first socket of a surface gets a fresh
        # render from the broadcaster instead.
        snapshot = broadcaster.attach(surface, perms)
        if snapshot:
            await self._push(snapshot)

    async def _detach(self) -> None:
        attached, self.attached = self.attached, None
        if attached is not None:
            get_broadcaster().detach(*attached)
        group, self.live_group = self.live_group, ""
        if group:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def _end(self, code: int) -> None:
        """Close the socket from the server side; no push is sent after this."""
        if self.ended:
            return
        self.ended = True
        await self._detach()
        await self.close(code=code)

    # --- the session's life -------------------------------------------------------------

    async def _recheck(self) -> None:
        """Read the session again every ``ACKBOARD_LIVE_RECHECK`` seconds (see module doc)."""
        try:
            await self._recheck_loop()
        except Exception:
            # A socket whose authorization is no longer checked must not stay open.
            log.exception("live: session recheck failed; closing the socket")
            await self._end(CLOSE_ERROR)

    async def _recheck_loop(self) -> None:
        failed = 0
        joined_at = time.monotonic()
        while not self.ended:
            await asyncio.sleep(float(settings.ACKBOARD_LIVE_RECHECK))
            if self.live_group and time.monotonic() - joined_at >= REJOIN_S:
                await self.channel_layer.group_add(self.live_group, self.channel_name)
                joined_at = time.monotonic()
            try:
                perms = await database_sync_to_async(session_perms)(
                    session_key=self.session_key, user_id=self.user_id
                )
            except DatabaseError as exc:
                failed += 1
                socket_warnings.warn(
                    "recheck", "live: could not re-read a socket's session (%s)", exc
                )
                if failed >= UNVERIFIED_LIMIT:
                    await self._end(CLOSE_RETRY)  # fail closed; the browser comes back later
                continue
            failed = 0
            if isinstance(perms, int):
                await self._end(perms)
            elif self.attached is not None and perms != self.attached[1]:
                surface = self.attached[0]
                await self._detach()
                await self._attach(surface, perms)

    async def _hear_notices(self) -> None:
        """Wait for the session-ended notice on the shared layer, through Redis outages."""
        layer = shared_layer()
        channel = await layer.new_channel()
        group = session_group(self.session_key)
        joined = False
        backoff = Backoff(base=1.0, cap=30.0)
        try:
            while not self.ended:
                try:
                    if not joined:
                        await layer.group_add(group, channel)
                        joined = True
                    message = await asyncio.wait_for(layer.receive(channel), REJOIN_S)
                except TimeoutError:
                    joined = False  # nothing for an hour: join again (see REJOIN_S)
                    continue
                except (redis.RedisError, OSError) as exc:
                    # Redis is away. The recheck still ends the socket in time; the group
                    # may have gone with Redis's data, so it is joined again when back.
                    joined = False
                    socket_warnings.warn(
                        "notices", "live: session notices unavailable, retrying (%s)", exc
                    )
                    await asyncio.sleep(backoff.failed())
                    continue
                backoff.succeeded()
                if message.get("type") == SESSION_ENDED:
                    await self._end(CLOSE_LOGIN)
        finally:
            if joined:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(layer.group_discard(group, channel), NOTICE_TIMEOUT_S)
