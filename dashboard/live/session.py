"""What a socket's session may read now, and the notice that a session ended.

Owns the rules a socket's authorization lasts by: Django's own session rules
(``auth.get_user``: the session exists and is unexpired, its user is active, its password
hash current), ``dashboard.view_queues`` to read at all, and the ``dashboard.*`` set that
chooses which rendering a socket gets. On logout (``user_logged_out``) it announces the
end on the "shared" layer (channels-redis, so every web process hears it) to a group named
after a hash of the session key; the consumers close that session's sockets at once.

Never writes the session (a socket cannot set cookies) and never talks to Redis but
through the shared layer. Cost of a check: the session load (one query for the database
backend), the user and their permissions (two queries).
"""

from __future__ import annotations

import asyncio
import hashlib
from importlib import import_module
from typing import Any

from asgiref.sync import async_to_sync
from channels import DEFAULT_CHANNEL_LAYER
from channels.db import database_sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver
from django.http import HttpRequest

from dashboard.live.logs import socket_warnings
from dashboard.live.registry import Perms

#: Close codes (application range) for a session that may not read. The ws extension
#: reconnects only after abnormal closures, so these end the socket for good and live.js
#: says why.
CLOSE_LOGIN = 4401
CLOSE_FORBIDDEN = 4403
#: Alias of the layer every web process hears (channels-redis, see settings.CHANNEL_LAYERS).
#: Where it is not configured (unit tests), the default layer stands in.
SHARED_LAYER = "shared"
SESSION_ENDED = "session.ended"
#: A logout waits at most this long to announce itself; the recheck covers a slow Redis.
NOTICE_TIMEOUT_S = 1.0


def _user_perms_sync(user: Any) -> Perms | int:
    if user is None or not user.is_authenticated:
        return CLOSE_LOGIN
    if not user.has_perm("dashboard.view_queues"):
        return CLOSE_FORBIDDEN
    return frozenset(p for p in user.get_all_permissions() if p.startswith("dashboard."))


async def user_perms(user: Any) -> Perms | int:
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
    """What the session ``session_key`` of user ``user_id`` may read now, or a close code
    (see the module docstring for the rules and the cost)."""
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


def shared_layer() -> BaseChannelLayer:
    alias = SHARED_LAYER if SHARED_LAYER in settings.CHANNEL_LAYERS else DEFAULT_CHANNEL_LAYER
    layer: BaseChannelLayer = get_channel_layer(alias)
    return layer


async def _announce_session_ended(session_key: str) -> None:
    layer = shared_layer()
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
        socket_warnings.warn(
            "notice",
            "live: could not announce a logout to open sockets (%s: %s); they close within %.0fs",
            type(exc).__name__,
            exc,
            settings.ACKBOARD_LIVE_RECHECK,
        )
