"""WebSocket consumers: one per live surface. They only ever send; they never write.

A consumer checks the login and ``dashboard.view_queues`` in ``connect`` (closing the
socket otherwise), joins the channels group of its surface and permission set, and
forwards ``surface.update`` events (rendered partials) to the browser. It never talks
to Redis for them: the process's one broadcaster (``dashboard.broadcaster``) polls and
renders for every socket and delivers through the in-process "default" layer, so Redis
load does not grow with the number of tabs and a Redis restart cannot cut a socket off.

Authorization lasts only as long as the session and its permissions do:

- every ``ACKBOARD_LIVE_RECHECK`` seconds (2) the socket reads its session again: the
  session row, the user and their permissions (a few indexed SQL queries in a thread, no
  Redis). A session that ended or expired, a changed password or a deactivated user
  closes it with 4401, a lost ``view_queues`` with 4403, and a changed permission set
  moves it to that set's rendering at once (so the buttons pushed match the user's rights);
- a logout (``user_logged_out``) also sends a notice on the "shared" layer
  (channels-redis, so every web process hears it) to a group named after a hash of the
  session key, which closes that session's sockets at once. The notice is the fast path
  and the recheck the guarantee: if Redis is away, sockets close at the next recheck.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from importlib import import_module
from typing import Any, ClassVar

import redis
from asgiref.sync import async_to_sync
from channels import DEFAULT_CHANNEL_LAYER
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import BaseChannelLayer, get_channel_layer
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.signals import user_logged_out
from django.db import Error as DatabaseError
from django.dispatch import receiver
from django.http import HttpRequest

from dashboard.broadcaster import Perms, Surface, get_broadcaster
from dashboard.converters import NameConverter, name_problem
from queue_core.keys import stream_visible
from queue_core.services import entry_id_check

log = logging.getLogger("ackboard.live")

#: Close codes (application range). The ws extension reconnects only after abnormal
#: closures (1006, 1011-1013), so these end the socket for good and live.js says why.
CLOSE_LOGIN = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
#: "Try again later": the session could not be read for a while (database unreachable).
#: The ws extension reconnects after it, and ``connect`` checks everything afresh.
CLOSE_RETRY = 1013
#: "Internal error": the ws extension reconnects after it too.
CLOSE_ERROR = 1011
#: Alias of the layer every web process hears (channels-redis, see settings.CHANNEL_LAYERS).
#: Where it is not configured (unit tests), the default layer stands in.
SHARED_LAYER = "shared"
SESSION_ENDED = "session.ended"
#: A logout waits at most this long to announce itself; the recheck covers a slow Redis.
NOTICE_TIMEOUT_S = 1.0
#: Rechecks in a row that may fail to read the session before the socket is closed.
UNVERIFIED_LIMIT = 5
#: Layers forget a group member after their group_expiry (a day by default): a socket
#: joins its groups again this often, so a tab open for days keeps its pushes.
REJOIN_S = 3600.0
#: The same warning (Redis or the database away) is logged at most once a minute per
#: process, not once per socket and retry.
WARN_EVERY_S = 60.0
_warned_at: dict[str, float] = {}


def _warn(kind: str, message: str, *args: Any) -> None:
    now = time.monotonic()
    if now - _warned_at.get(kind, -WARN_EVERY_S) >= WARN_EVERY_S:
        _warned_at[kind] = now
        log.warning(message, *args)


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


class _StoredSession(dict[str, Any]):
    """A session's data as stored, for ``auth.get_user``, which never gets to write it.

    A page request may flush a session whose password hash no longer verifies, or give it
    a new key after a secret-key rotation, and then set the new cookie. A socket cannot
    set cookies, so its check must change nothing: a refused hash only empties this copy.
    """

    def flush(self) -> None:
        self.clear()

    def cycle_key(self) -> None:
        pass


def session_perms(*, session_key: str, user_id: Any) -> Perms | int:
    """What the session ``session_key`` of user ``user_id`` may read now, or a close code.

    Django's own rules (``auth.get_user``): the session must exist and be unexpired, its
    user active, and its password hash current. Cost: the session load (one query for the
    database backend), the user, and their permissions (two queries).
    """
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    request = HttpRequest()
    request.session = _StoredSession(store.load())  # type: ignore[assignment]
    user = auth.get_user(request)
    if not user.is_authenticated or user.pk != user_id:
        return CLOSE_LOGIN
    return _user_perms_sync(user)


def session_group(session_key: str) -> str:
    """The channels group of a session's sockets; the key itself never reaches Redis."""
    return "ackboard.session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def _shared_layer() -> BaseChannelLayer:
    alias = SHARED_LAYER if SHARED_LAYER in settings.CHANNEL_LAYERS else DEFAULT_CHANNEL_LAYER
    layer: BaseChannelLayer = get_channel_layer(alias)
    return layer


async def _announce_session_ended(session_key: str) -> None:
    layer = _shared_layer()
    message = {"type": SESSION_ENDED}
    await asyncio.wait_for(layer.group_send(session_group(session_key), message), NOTICE_TIMEOUT_S)


@receiver(user_logged_out, dispatch_uid="ackboard.live.session-ended")
def _session_ended(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """On logout, close the session's sockets in every web process at once."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if not session_key:
        return
    try:
        async_to_sync(_announce_session_ended)(session_key)
    except Exception as exc:  # a logout never fails for this: the recheck closes them
        _warn(
            "notice",
            "live: could not announce a logout to open sockets (%s: %s); they close within %.0fs",
            type(exc).__name__,
            exc,
            settings.ACKBOARD_LIVE_RECHECK,
        )


def _name(raw: str | None) -> str | None:
    if raw is None:
        return None
    name = NameConverter().to_python(raw)
    return None if name_problem(name) else name  # the pages' own rule


class SurfaceConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """Base consumer: subclasses say which surface kind their route is."""

    kind: ClassVar[str] = ""
    live_group: str = ""
    attached: tuple[Surface, Perms] | None = None
    session_key: str = ""
    user_id: Any = None
    #: Set once the server closed the socket: nothing is sent after that.
    ended: bool = False
    watchers: tuple[asyncio.Task[None], ...] = ()

    def surface(self) -> Surface | None:
        kwargs: dict[str, str] = self.scope["url_route"]["kwargs"]
        if self.kind == "overview":
            return Surface("overview")
        stream = _name(kwargs.get("stream"))
        if stream is None or not stream_visible(stream, tuple(settings.ACKBOARD_STREAMS)):
            return None  # hidden, or a companion (shown under its stream, as on the pages)
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
        user = self.scope.get("user")
        perms = await _user_perms(user)
        surface = self.surface()
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
        if not self.ended:
            await self.send(text_data=event["html"])

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
            await self.send(text_data=snapshot)

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
                _warn("recheck", "live: could not re-read a socket's session (%s)", exc)
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
        layer = _shared_layer()
        channel = await layer.new_channel()
        group = session_group(self.session_key)
        joined = False
        failures = 0
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
                    failures += 1
                    _warn("notices", "live: session notices unavailable, retrying (%s)", exc)
                    await asyncio.sleep(min(30.0, 0.5 * 2 ** min(failures, 6)))
                    continue
                failures = 0
                if message.get("type") == SESSION_ENDED:
                    await self._end(CLOSE_LOGIN)
        finally:
            if joined:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(layer.group_discard(group, channel), NOTICE_TIMEOUT_S)


class OverviewConsumer(SurfaceConsumer):
    kind = "overview"


class StreamConsumer(SurfaceConsumer):
    kind = "stream"


class GroupConsumer(SurfaceConsumer):
    kind = "group"


class EntryConsumer(SurfaceConsumer):
    kind = "entry"
