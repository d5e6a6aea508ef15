"""The WebSocket consumer of every live surface. It only ever sends; it never writes.

One consumer class serves each kind in ``registry.KINDS`` (its route passes the kind).
It checks the login and ``dashboard.view_queues`` in ``connect`` (closing the socket
otherwise), hands the process's one broadcaster (``dashboard.live.broadcaster``) its
outbox (``dashboard.live.outbox``) for its surface and permission set, and sends what
arrives there. It never talks to Redis for that: the broadcaster polls and renders once
for every socket of the process and puts the same partials in each outbox, so Redis load
does not grow with the number of tabs and a Redis restart cannot cut a socket off. No
channel layer carries the pushes (a socket gets no layer channel at all): within one
process a dict of outboxes is all the fan-out needs.

Authorization lasts only as long as the session and its permissions do. The process's
``SessionWatch`` (``dashboard.live.session``) holds the rules and checks every socket's
session in one batch every ``ACKBOARD_LIVE_RECHECK`` seconds, and hears logouts; it
calls ``session_ended`` (close with its code) or ``session_changed`` (a new permission
set: the socket moves to that set's rendering at once, so the buttons pushed match the
user's rights).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer

from dashboard.access.scopes import VIEW_QUEUES, Access
from dashboard.live.broadcaster import get_broadcaster
from dashboard.live.outbox import Outbox
from dashboard.live.registry import Perms, Surface, surface_from_route
from dashboard.live.session import CLOSE_LOGIN, session_watch, user_perms

#: Not a live page (a hidden stream, a companion, a name or id the page refuses).
CLOSE_NOT_FOUND = 4404
#: No channel layer for these sockets: channels gives a consumer one channel (and a task
#: waiting on it) per socket unless its alias names no configured layer.
NO_LAYER = "ackboard.live.no-layer"


def surface_scoped(surface: Surface, grants: Perms) -> tuple[Surface, Perms] | None:
    """The surface and permission set a socket with ``grants`` is rendered for: a stream's
    surface with what reaches the stream (None if the user may not read it), a surface
    listing every stream with the streams they may read (``reach``) and what is granted
    everywhere."""
    access = Access(grants)
    if surface.stream:
        perms = access.on(surface.stream)
        return (surface, perms) if VIEW_QUEUES in perms else None
    if not access.anywhere(VIEW_QUEUES):
        return None
    return replace(surface, reach=access.reach() or ()), access.unscoped() | {VIEW_QUEUES}


class SurfaceConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """A socket on one live surface; its route says which kind (``as_asgi(kind=…)``)."""

    channel_layer_alias = NO_LAYER
    kind: str = ""
    attached: tuple[Surface, Perms] | None = None
    #: The user's grants the socket was attached for (what the session watch compares).
    grants: Perms | None = None
    session_key: str = ""
    user_id: Any = None
    outbox: Outbox | None = None
    #: Set once the server closed the socket: nothing is sent after that.
    ended: bool = False

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
        if not isinstance(perms, int) and surface and surface_scoped(surface, perms) is None:
            surface = None  # a stream no role of the user reaches: as if none existed
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
        self.outbox = Outbox(self.push)
        self._attach(surface, perms)
        session_watch().watch(self)

    async def disconnect(self, code: int) -> None:
        self.ended = True
        session_watch().unwatch(self)
        self._detach()
        outbox, self.outbox = self.outbox, None
        if outbox is not None:
            await outbox.close()

    async def push(self, html: str) -> None:
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

    def _attach(self, surface: Surface, grants: Perms) -> bool:
        """Attach to ``surface`` as the user's ``grants`` let them see it: a stream's
        surface rendered with the permissions that reach the stream, the overview with the
        streams they may read. False (nothing attached) if they may no longer read it."""
        assert self.outbox is not None
        scoped = surface_scoped(surface, grants)
        if scoped is None:
            return False
        self.grants = grants
        surface, perms = scoped
        self.attached = (surface, perms)
        # The last rendered state, from memory, goes into the outbox at once: a
        # reconnecting tab catches up on what it missed without a Redis command. The first
        # socket of a surface gets a fresh render from the broadcaster instead.
        get_broadcaster().attach(surface, perms, self.outbox)
        return True

    def _detach(self) -> None:
        attached, self.attached = self.attached, None
        if attached is not None and self.outbox is not None:
            get_broadcaster().detach(*attached, self.outbox)

    # --- the session's life (called by the SessionWatch) --------------------------------

    def current_perms(self) -> Perms | None:
        return self.grants if self.attached is not None else None

    async def session_ended(self, code: int) -> None:
        """Close the socket from the server side; no push is sent after this."""
        if self.ended:
            return
        self.ended = True
        session_watch().unwatch(self)
        self._detach()
        await self.close(code=code)

    async def session_changed(self, perms: Perms) -> None:
        if self.attached is not None and not self.ended:
            surface = self.attached[0]
            self._detach()
            if not self._attach(replace(surface, reach=()), perms):
                await self.session_ended(CLOSE_NOT_FOUND)


class UnroutedConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """A socket on a path no surface serves (``/ws/``, ``/ws/nope/``, anything else): closed
    with 4404 at once, without reading the session, the user or Redis. Without it Channels'
    router raises ValueError ("No route found"), which the server answers with a 500 and a
    logged traceback per handshake."""

    channel_layer_alias = NO_LAYER

    async def connect(self) -> None:
        # As SurfaceConsumer refuses: accepted only to close with a reason, nothing sent.
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)
