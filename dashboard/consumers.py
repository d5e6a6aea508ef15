"""WebSocket consumers: one per live surface. They only ever send; they never write.

A consumer checks the login and ``dashboard.view_queues`` in ``connect`` (closing the
socket otherwise), joins the channels group of its surface and permission set, and
forwards ``surface.update`` events (rendered partials) to the browser. It never talks
to Redis itself: the process's one broadcaster (``dashboard.broadcaster``) polls and
renders for every socket, so Redis load does not grow with the number of tabs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from dashboard.broadcaster import Perms, Surface, get_broadcaster
from dashboard.converters import NameConverter
from queue_core.keys import MAX_NAME_LENGTH, allowed, companion_parent
from queue_core.services import entry_id_check

#: Close codes (application range). The ws extension reconnects only after abnormal
#: closures (1006, 1011-1013), so these end the socket for good and live.js says why.
CLOSE_LOGIN = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404


def _user_perms_sync(user: Any) -> Perms | int:
    if user is None or not user.is_authenticated:
        return CLOSE_LOGIN
    if not user.has_perm("dashboard.view_queues"):
        return CLOSE_FORBIDDEN
    return frozenset(p for p in user.get_all_permissions() if p.startswith("dashboard."))


async def _user_perms(user: Any) -> Perms | int:
    """The user's ``dashboard.*`` permissions, or the close code when they may not read."""
    perms: Perms | int = await database_sync_to_async(_user_perms_sync)(user)
    return perms


def _name(raw: str | None) -> str | None:
    if raw is None:
        return None
    name = NameConverter().to_python(raw)
    if not name or len(name) > MAX_NAME_LENGTH or "\x00" in name:
        return None
    return name


class SurfaceConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """Base consumer: subclasses say which surface kind their route is."""

    kind: ClassVar[str] = ""
    live_group: str = ""
    attached: tuple[Surface, Perms] | None = None

    def surface(self) -> Surface | None:
        kwargs: dict[str, str] = self.scope["url_route"]["kwargs"]
        if self.kind == "overview":
            return Surface("overview")
        stream = _name(kwargs.get("stream"))
        if stream is None or not allowed(stream, tuple(settings.ACKBOARD_STREAMS)):
            return None
        if companion_parent(stream) is not None:
            return None  # companions are shown under their stream, as on the pages
        if self.kind == "stream":
            return Surface("stream", stream=stream)
        if self.kind == "group":
            group = _name(kwargs.get("group"))
            return None if group is None else Surface("group", stream=stream, group=group)
        entry_id = kwargs.get("entry_id", "")
        try:
            # The page's own check (both parts within 64 bits), so a socket never follows
            # an id the page answers 400 for.
            entry_id_check(entry_id)
        except ValueError:
            return None
        return Surface("entry", stream=stream, entry_id=entry_id)

    async def connect(self) -> None:
        perms = await _user_perms(self.scope.get("user"))
        surface = self.surface()
        if isinstance(perms, int) or surface is None:
            # Accept only to close with a reason: a refused handshake looks like a network
            # failure to the browser (1006), which the ws extension would retry forever.
            # Nothing is sent before the close.
            await self.accept()
            await self.close(code=perms if isinstance(perms, int) else CLOSE_NOT_FOUND)
            return
        broadcaster = get_broadcaster()
        self.live_group = broadcaster.group_name(surface, perms)
        await self.channel_layer.group_add(self.live_group, self.channel_name)
        await self.accept()
        self.attached = (surface, perms)
        # The last rendered state, from memory: a reconnecting tab catches up on what it
        # missed without a Redis command. The first socket of a surface gets a fresh
        # render from the broadcaster instead.
        snapshot = broadcaster.attach(surface, perms)
        if snapshot:
            await self.send(text_data=snapshot)

    async def disconnect(self, code: int) -> None:
        if self.attached is not None:
            get_broadcaster().detach(*self.attached)
            self.attached = None
        if self.live_group:
            await self.channel_layer.group_discard(self.live_group, self.channel_name)

    async def surface_update(self, event: dict[str, Any]) -> None:
        """Rendered partials for this surface: root elements whose ids the page swaps."""
        await self.send(text_data=event["html"])


class OverviewConsumer(SurfaceConsumer):
    kind = "overview"


class StreamConsumer(SurfaceConsumer):
    kind = "stream"


class GroupConsumer(SurfaceConsumer):
    kind = "group"


class EntryConsumer(SurfaceConsumer):
    kind = "entry"
