"""What a socket's session may read now, and the one watch over every socket's session.

Owns the rules a socket's authorization lasts by: Django's own session rules
(``auth.get_user``: the session exists and is unexpired, its user is active, its password
hash current), ``dashboard.view_queues`` on some stream to read at all, and the user's
grants (``dashboard.access.scopes``: each permission everywhere or on stream patterns),
from which the socket picks its rendering. On logout (``user_logged_out``) it announces the
end on the "shared" layer (channels-redis, so every web process hears it) to a group named
after a hash of the session key.

``SessionWatch`` (one per process, ``session_watch()``) applies those rules to every open
socket of the process:

- every ``ACKBOARD_LIVE_RECHECK`` seconds (2) one batched check, ``sessions_perms``, for
  all sockets at once, grouped by session: a session that ended or expired, a changed
  password or a deactivated user closes its sockets with 4401, a lost ``view_queues``
  with 4403, and a changed permission set moves them to that set's rendering;
- one channel on the shared layer, joined to the notice group of each open *session*
  (not each socket), so a logout closes that session's sockets at once. The notice is
  the fast path and the recheck the guarantee: if Redis is away, sockets close at the
  next recheck.

Never writes the session (a socket cannot set cookies) and never talks to Redis but
through the shared layer. Cost of one batched check, for any number of sockets: one query
for the session rows; then one query for the users and three for their grants (one
more when a superuser is among them). With another session engine
or another permission backend it falls back to ``session_perms`` per *session* (one load
plus two queries each), never per socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Collection, Iterable
from importlib import import_module
from typing import Any, Protocol

import redis
from asgiref.sync import async_to_sync
from channels import DEFAULT_CHANNEL_LAYER
from channels.db import database_sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_out
from django.contrib.sessions.backends.db import SessionStore as DBStore
from django.core.exceptions import ValidationError
from django.db import Error as DatabaseError
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from dashboard.access.scopes import VIEW_QUEUES, Access, access_of, grants_many
from dashboard.live.registry import Perms
from dashboard.runtime.logs import socket_warnings
from queue_core.backoff import Backoff

log = logging.getLogger("ackboard.live")

#: Close codes (application range) for a session that may not read. The ws extension
#: reconnects only after abnormal closures, so these end the socket for good and live.js
#: says why.
CLOSE_LOGIN = 4401
CLOSE_FORBIDDEN = 4403
#: "Try again later": the sessions could not be read for a while (database unreachable).
#: The ws extension reconnects after it, and the socket's ``connect`` checks afresh.
CLOSE_RETRY = 1013
#: "Internal error": the ws extension reconnects after it too.
CLOSE_ERROR = 1011
#: Rechecks in a row that may fail to read the sessions before their sockets are closed.
UNVERIFIED_LIMIT = 5
#: Alias of the layer every web process hears (channels-redis, see settings.CHANNEL_LAYERS).
#: Where it is not configured (unit tests), the default layer stands in.
SHARED_LAYER = "shared"
SESSION_ENDED = "session.ended"
#: A logout waits at most this long to announce itself; the recheck covers a slow Redis.
NOTICE_TIMEOUT_S = 1.0
#: Layers forget a group member after their group_expiry (a day by default): the watch
#: joins its session groups again this often, so a tab open for days hears its logout.
REJOIN_S = 3600.0
#: Session keys per SQL query (SQLite allows 999 parameters on old builds).
CHUNK = 500


def _user_perms_sync(user: Any) -> Perms | int:
    if user is None or not user.is_authenticated:
        return CLOSE_LOGIN
    grants = access_of(user).grants
    if not Access(grants).anywhere(VIEW_QUEUES):
        return CLOSE_FORBIDDEN
    return grants


async def user_perms(user: Any) -> Perms | int:
    """The user's grants (``dashboard.access.scopes``: each permission everywhere or on a
    stream pattern), or the close code when they may read no stream."""
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

    The reference rule, through ``auth.get_user`` itself: one session load and two
    queries. ``sessions_perms`` gives the same answers for many sockets in O(1) queries.
    """
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    request = HttpRequest()
    request.session = _StoredSession(store.load())  # type: ignore[assignment]
    user = auth.get_user(request)
    if not user.is_authenticated or user.pk != user_id:
        return CLOSE_LOGIN
    return _user_perms_sync(user)


# --- the batched check ---------------------------------------------------------------------


def sessions_load(keys: Collection[str]) -> dict[str, dict[str, Any]]:
    """The stored data of each of ``keys`` that still exists and has not expired.

    Database sessions (Django's ``db`` engine and its subclasses): one query per CHUNK
    keys, from the rows. Any other engine: one ``load()`` per key.
    """
    store_class = import_module(settings.SESSION_ENGINE).SessionStore
    if not issubclass(store_class, DBStore):
        loaded = {key: store_class(key).load() for key in keys}
        return {key: data for key, data in loaded.items() if data}
    store = store_class()
    found: dict[str, dict[str, Any]] = {}
    missing = sorted(keys)
    now = timezone.now()
    for at in range(0, len(missing), CHUNK):
        rows = store.model.objects.filter(
            session_key__in=missing[at : at + CHUNK], expire_date__gt=now
        ).values_list("session_key", "session_data")
        for key, data in rows:
            decoded = store.decode(data)
            if decoded:
                found[key] = decoded
    return found


def _batchable_backends() -> bool:
    """Whether Django's ``ModelBackend`` alone decides users and permissions: every
    configured backend is it, or one that grants no permissions (axes only refuses
    logins). Then ``sessions_perms`` may read users and permissions in bulk."""
    for path in settings.AUTHENTICATION_BACKENDS:
        backend = auth.load_backend(path)
        if type(backend) is ModelBackend:
            continue
        grants = ("get_all_permissions", "get_user_permissions", "get_group_permissions")
        if any(hasattr(backend, name) for name in (*grants, "has_perm", "has_module_perms")):
            return False
    return True


def _hash_verified(data: dict[str, Any], user: Any) -> bool:
    """``auth.get_user``'s session hash rule: the current secret or a fallback one."""
    session_hash = data.get(auth.HASH_SESSION_KEY)
    if not session_hash:
        return False
    if constant_time_compare(session_hash, user.get_session_auth_hash()):
        return True
    return any(
        constant_time_compare(session_hash, fallback)
        for fallback in user.get_session_auth_fallback_hash()
    )


def sessions_perms(*, sockets: Iterable[tuple[str, Any]]) -> dict[tuple[str, Any], Perms | int]:
    """``session_perms`` for many (session key, user id) pairs at once (see the module
    docstring for the cost): the same rules, answered per pair."""
    pairs = set(sockets)
    if not pairs:
        return {}
    if not _batchable_backends():
        return {pair: session_perms(session_key=pair[0], user_id=pair[1]) for pair in pairs}
    stored = sessions_load({key for key, _ in pairs})
    user_model = auth.get_user_model()
    claimed: dict[str, Any] = {}  # session key -> the user pk it is logged in as
    others: set[str] = set()  # sessions logged in through another backend
    for key, data in stored.items():
        try:
            pk = user_model._meta.pk.to_python(data[auth.SESSION_KEY])
            backend_path = data[auth.BACKEND_SESSION_KEY]
        except (KeyError, ValidationError):
            continue
        if backend_path not in settings.AUTHENTICATION_BACKENDS:
            continue
        if type(auth.load_backend(backend_path)) is not ModelBackend:
            others.add(key)
            continue
        claimed[key] = pk
    users = {
        user.pk: user
        for user in user_model._default_manager.filter(pk__in=set(claimed.values()))
        if ModelBackend().user_can_authenticate(user)  # is_active, as get_user checks
    }
    # The same grants as access_of gives one user (three queries for them all).
    perms = grants_many(users, [pk for pk, u in users.items() if u.is_superuser])
    verdicts: dict[tuple[str, Any], Perms | int] = {}
    for key, user_id in pairs:
        if key in others:
            verdicts[(key, user_id)] = session_perms(session_key=key, user_id=user_id)
            continue
        user = users.get(claimed[key]) if key in claimed else None
        if user is None or user.pk != user_id or not _hash_verified(stored[key], user):
            verdicts[(key, user_id)] = CLOSE_LOGIN
        elif not Access(perms[user.pk]).anywhere(VIEW_QUEUES):
            verdicts[(key, user_id)] = CLOSE_FORBIDDEN
        else:
            verdicts[(key, user_id)] = perms[user.pk]
    return verdicts


# --- the watch over every socket of the process --------------------------------------------


class Watched(Protocol):
    """A socket as the watch sees it (``consumers.SurfaceConsumer``)."""

    session_key: str
    user_id: Any

    def current_perms(self) -> Perms | None: ...

    async def session_ended(self, code: int) -> None: ...

    async def session_changed(self, perms: Perms) -> None: ...


class SessionWatch:
    """Every open socket of this process, by session (see the module docstring).

    Two tasks, started by the first socket and ending with the last: the recheck (one
    ``sessions_perms`` call in a database thread per ``ACKBOARD_LIVE_RECHECK``) and the
    notice listener (one shared-layer channel, one group per open session).
    """

    def __init__(self) -> None:
        self._sockets: dict[str, set[Watched]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recheck: asyncio.Task[None] | None = None
        self._notices: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        #: Batched checks done (tests count them against the sockets).
        self.checks = 0

    def watch(self, socket: Watched) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A new event loop (a test's): sockets of the old one are gone with it.
            self._sockets.clear()
            self._recheck = self._notices = None
            self._loop = loop
            self._changed = asyncio.Event()
        self._sockets.setdefault(socket.session_key, set()).add(socket)
        if self._recheck is None or self._recheck.done():
            self._recheck = loop.create_task(self._recheck_loop(), name="ackboard-live-recheck")
        if self._notices is None or self._notices.done():
            self._notices = loop.create_task(self._notices_loop(), name="ackboard-live-notices")
        assert self._changed is not None
        self._changed.set()

    def unwatch(self, socket: Watched) -> None:
        sockets = self._sockets.get(socket.session_key)
        if sockets is None:
            return
        sockets.discard(socket)
        if not sockets:
            del self._sockets[socket.session_key]
            if self._changed is not None:
                self._changed.set()

    def sockets(self) -> list[Watched]:
        return [socket for group in self._sockets.values() for socket in group]

    def sessions(self) -> int:
        return len(self._sockets)

    async def _end_all(self, code: int) -> None:
        for socket in self.sockets():
            await socket.session_ended(code)

    # --- the recheck ------------------------------------------------------------------

    async def _recheck_loop(self) -> None:
        failed = 0
        while True:
            await asyncio.sleep(float(settings.ACKBOARD_LIVE_RECHECK))
            sockets = self.sockets()
            if not sockets:
                return  # the next socket starts a new loop
            try:
                verdicts = await database_sync_to_async(sessions_perms)(
                    sockets=[(s.session_key, s.user_id) for s in sockets]
                )
            except DatabaseError as exc:
                failed += 1
                socket_warnings.warn("recheck", "live: could not re-read sessions (%s)", exc)
                if failed >= UNVERIFIED_LIMIT:
                    await self._end_all(CLOSE_RETRY)  # fail closed; browsers come back later
                continue
            except Exception:
                # Sockets whose authorization is no longer checked must not stay open.
                log.exception("live: session recheck failed; closing the sockets")
                await self._end_all(CLOSE_ERROR)
                continue
            failed = 0
            self.checks += 1
            for socket in sockets:
                if socket not in self._sockets.get(socket.session_key, ()):
                    continue  # it left while the check ran
                verdict = verdicts[(socket.session_key, socket.user_id)]
                try:
                    if isinstance(verdict, int):
                        await socket.session_ended(verdict)
                    elif verdict != socket.current_perms():
                        await socket.session_changed(verdict)
                except Exception:
                    log.exception("live: could not apply a session check to a socket")

    # --- the logout notices -----------------------------------------------------------

    async def _notices_loop(self) -> None:
        """Join one shared-layer group per open session, hear ``session.ended`` notices,
        and end that session's sockets; through Redis outages (join again when back)."""
        assert self._changed is not None
        changed = self._changed
        layer = shared_layer()
        channel = await layer.new_channel()
        joined: set[str] = set()
        joined_at = asyncio.get_running_loop().time()
        backoff = Backoff(base=1.0, cap=30.0)
        receiving: asyncio.Task[dict[str, Any]] | None = None
        try:
            while True:
                changed.clear()
                wanted = {session_group(key): key for key in self._sockets}
                try:
                    if asyncio.get_running_loop().time() - joined_at >= REJOIN_S:
                        joined.clear()  # join every group again (see REJOIN_S)
                        joined_at = asyncio.get_running_loop().time()
                    for group in wanted.keys() - joined:
                        await layer.group_add(group, channel)
                        joined.add(group)
                    for group in joined - wanted.keys():
                        joined.discard(group)
                        await asyncio.wait_for(
                            layer.group_discard(group, channel), NOTICE_TIMEOUT_S
                        )
                    if not joined and not self._sockets:
                        return  # no await since the check: the next socket starts anew
                    if receiving is None:
                        receiving = asyncio.ensure_future(layer.receive(channel))
                    waking = asyncio.ensure_future(changed.wait())
                    done, _ = await asyncio.wait(
                        {receiving, waking}, timeout=REJOIN_S, return_when=asyncio.FIRST_COMPLETED
                    )
                    waking.cancel()
                    if receiving not in done:
                        continue
                    message, receiving = receiving.result(), None
                except (redis.RedisError, OSError, TimeoutError) as exc:
                    # Redis is away. The recheck still ends sockets in time; the groups may
                    # have gone with Redis's data, so they are joined again when back.
                    receiving, joined = None, set()
                    socket_warnings.warn(
                        "notices", "live: session notices unavailable, retrying (%s)", exc
                    )
                    await asyncio.sleep(backoff.failed())
                    continue
                backoff.succeeded()
                if message.get("type") == SESSION_ENDED:
                    groups = {session_group(k): k for k in self._sockets}
                    key = groups.get(str(message.get("session")), "")
                    for socket in list(self._sockets.get(key, ())):
                        await socket.session_ended(CLOSE_LOGIN)
        finally:
            if receiving is not None:
                receiving.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await receiving


_watch = SessionWatch()


def session_watch() -> SessionWatch:
    """This process's watch over its sockets' sessions."""
    return _watch


# --- the logout notice -----------------------------------------------------------------


def session_group(session_key: str) -> str:
    """The channels group of a session's sockets; the key itself never reaches Redis."""
    return "ackboard.session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def shared_layer() -> BaseChannelLayer:
    alias = SHARED_LAYER if SHARED_LAYER in settings.CHANNEL_LAYERS else DEFAULT_CHANNEL_LAYER
    layer: BaseChannelLayer = get_channel_layer(alias)
    return layer


async def _announce_session_ended(session_key: str) -> None:
    layer = shared_layer()
    group = session_group(session_key)
    # "session" names the group: one listener per process hears every session's notices.
    message = {"type": SESSION_ENDED, "session": group}
    await asyncio.wait_for(layer.group_send(group, message), NOTICE_TIMEOUT_S)


@receiver(user_logged_out, dispatch_uid="ackboard.live.session-ended")
def _session_ended(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """On logout, close the session's sockets in every web process at once."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if not session_key:
        return
    try:
        async_to_sync(_announce_session_ended)(session_key)
    except Exception as exc:  # a logout never fails for this: the recheck closes them
        socket_warnings.warn(
            "notice",
            "live: could not announce a logout to open sockets (%s: %s); they close within %.0fs",
            type(exc).__name__,
            exc,
            settings.ACKBOARD_LIVE_RECHECK,
        )
