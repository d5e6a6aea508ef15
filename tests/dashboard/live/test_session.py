"""A socket's authorization lasts only as long as its session and permissions do.

Sockets go through the real ASGI application with the in-memory layer (the unit tests'
stand-in for channels-redis); the browser tier (tests/browser/test_production.py) runs
the same with daphne and channels-redis.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission, User
from django.contrib.sessions.models import Session
from django.test import Client

from dashboard.live import session
from dashboard.live.broadcaster import Broadcaster
from dashboard.routing import live_path
from tests.dashboard.live.sockets import (
    live_socket,
    receive_until,
)
from tests.dashboard.test_channel_layer import _layer_config
from tests.factories import make_pending
from tests.waiting import wait_until_async

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Login:
    user: User
    client: Client
    headers: list[tuple[bytes, bytes]]


LoginAs = Callable[..., Awaitable[Login]]


def _perm(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label="dashboard", codename=codename)


@pytest.fixture
def login_as(django_user_model: type[User]) -> LoginAs:
    counter = iter(range(1000))

    def make(*perms: str, user: User | None = None) -> Login:
        if user is None:
            user = django_user_model.objects.create_user(f"sess{next(counter)}", password="pw")
            user.user_permissions.add(*(_perm(c) for c in perms))
        client = Client()
        client.force_login(user)
        cookie = f"sessionid={client.cookies['sessionid'].value}"
        headers = [
            (b"cookie", cookie.encode()),
            (b"origin", b"http://testserver"),
            (b"host", b"testserver"),
        ]
        return Login(user, client, headers)

    return sync_to_async(make)


@pytest.fixture
def fast_recheck(live_settings: Any) -> float:
    live_settings.ACKBOARD_LIVE_RECHECK = 0.2
    return 0.2


async def _closed_with(ws: WebsocketCommunicator, timeout: float) -> tuple[int, float]:
    """The close code the server sent, and how long it took; pushes before it are skipped."""
    started = time.monotonic()
    while (left := started + timeout - time.monotonic()) > 0:
        try:
            message = await ws.receive_output(timeout=left)
        except TimeoutError:
            break
        if message["type"] == "websocket.close":
            return int(message["code"]), time.monotonic() - started
    raise AssertionError(f"the socket was still open after {timeout}s")


async def _open_group_socket(login: Login, r: redis.Redis, stream: str) -> WebsocketCommunicator:
    make_pending(r, stream, "billing", "w1", 1)
    ws = live_socket(live_path("group", stream=stream, group="billing"), login.headers)
    assert (await ws.connect())[0]
    await receive_until(ws, lambda m: 'id="pending-table"' in m)
    return ws


@sync_to_async
def _save(user: User, **fields: Any) -> None:
    for name, value in fields.items():
        setattr(user, name, value)
    user.save()


@sync_to_async
def _revoke(user: User, codename: str) -> None:
    user.user_permissions.remove(_perm(codename))


@sync_to_async
def _grant(user: User, codename: str) -> None:
    user.user_permissions.add(_perm(codename))


class SessionEndTests:
    async def test_logout_closes_the_socket_at_once(
        self,
        broadcaster: Broadcaster,
        login_as: LoginAs,
        r: redis.Redis,
        stream: str,
        live_settings: Any,
    ) -> None:
        # A recheck far away: only the logout notice can close the socket in time.
        live_settings.ACKBOARD_LIVE_RECHECK = 60.0
        login = await login_as("view_queues")
        ws = await _open_group_socket(login, r, stream)
        await sync_to_async(login.client.logout)()
        code, took = await _closed_with(ws, timeout=2.0)
        assert code == session.CLOSE_LOGIN
        assert took < 1.0
        assert broadcaster.sockets() == 0, "a closed socket gets no more pushes"

    async def test_logout_notice_travels_through_channels_redis(
        self,
        broadcaster: Broadcaster,
        login_as: LoginAs,
        r: redis.Redis,
        stream: str,
        live_settings: Any,
        redis_url: str,
        prefix: str,
    ) -> None:
        # Production's layers: pushes in-process, the session notice on the Redis pub/sub
        # layer, as another web process would send it.
        config = _layer_config(redis_url)
        config["prefix"] = prefix + "channels:"
        live_settings.CHANNEL_LAYERS = {
            "default": {"BACKEND": "channels.layers.InMemoryChannelLayer"},
            session.SHARED_LAYER: {
                "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                "CONFIG": config,
            },
        }
        live_settings.ACKBOARD_LIVE_RECHECK = 60.0
        login = await login_as("view_queues")
        ws = await _open_group_socket(login, r, stream)
        session_group = session.session_group(login.client.session.session_key)
        group_channel = f"{config['prefix']}__group__{session_group}"  # channels-redis's naming

        def subscribers() -> int:
            return int(dict(r.pubsub_numsub(group_channel)).get(group_channel.encode(), 0))

        await wait_until_async(subscribers, timeout=2, interval=0.05,
                               what="the socket's subscription to its session group")  # fmt: skip
        assert subscribers() == 1, "the socket subscribed to its session group in Redis"
        await sync_to_async(login.client.logout)()
        code, took = await _closed_with(ws, timeout=2.0)
        assert code == session.CLOSE_LOGIN
        assert took < 1.0

    async def test_logout_of_another_session_leaves_this_one_open(
        self,
        broadcaster: Broadcaster,
        login_as: LoginAs,
        r: redis.Redis,
        stream: str,
        fast_recheck: float,
    ) -> None:
        here = await login_as("view_queues")
        elsewhere = await login_as(user=here.user)
        ws = await _open_group_socket(here, r, stream)
        await sync_to_async(elsewhere.client.logout)()
        (new_id,) = make_pending(r, stream, "billing", "w2", 1, create=False)
        await receive_until(ws, lambda m: new_id in m)
        assert broadcaster.sockets() == 1
        await ws.disconnect()

    async def test_deleted_session_closes_the_socket(
        self,
        broadcaster: Broadcaster,
        login_as: LoginAs,
        r: redis.Redis,
        stream: str,
        fast_recheck: float,
    ) -> None:
        login = await login_as("view_queues")
        ws = await _open_group_socket(login, r, stream)
        # e.g. an admin clearing sessions, or the session expiring, without a logout view
        await sync_to_async(Session.objects.all().delete)()
        code, _ = await _closed_with(ws, timeout=2.0)
        assert code == session.CLOSE_LOGIN
        assert broadcaster.sockets() == 0

    async def test_password_change_elsewhere_closes_the_socket(
        self,
        broadcaster: Broadcaster,
        login_as: LoginAs,
        r: redis.Redis,
        stream: str,
        fast_recheck: float,
    ) -> None:
        login = await login_as("view_queues")
        ws = await _open_group_socket(login, r, stream)
        login.user.set_password("a new password")
        await _save(login.user)
        code, _ = await _closed_with(ws, timeout=2.0)
        assert code == session.CLOSE_LOGIN


class UserChangeTests:
    async def test_deactivated_user_is_closed_within_the_default_recheck(
        self, broadcaster: Broadcaster, login_as: LoginAs, r: redis.Redis, stream: str
    ) -> None:
        login = await login_as("view_queues")
        ws = await _open_group_socket(login, r, stream)
        await _save(login.user, is_active=False)
        code, took = await _closed_with(ws, timeout=4.0)
        assert code == session.CLOSE_LOGIN
        assert took <= 3.0, "within a few seconds"
        assert broadcaster.sockets() == 0

    async def test_removed_view_permission_closes_the_socket(
        self,
        broadcaster: Broadcaster,
        login_as: LoginAs,
        r: redis.Redis,
        stream: str,
        fast_recheck: float,
    ) -> None:
        login = await login_as("view_queues")
        ws = await _open_group_socket(login, r, stream)
        await _revoke(login.user, "view_queues")
        code, _ = await _closed_with(ws, timeout=2.0)
        assert code == session.CLOSE_FORBIDDEN
        assert broadcaster.sockets() == 0
        assert broadcaster.open_surfaces() == set()

    async def test_changed_permissions_switch_the_pushed_buttons(
        self,
        broadcaster: Broadcaster,
        login_as: LoginAs,
        r: redis.Redis,
        stream: str,
        fast_recheck: float,
    ) -> None:
        login = await login_as("view_queues")
        ws = await _open_group_socket(login, r, stream)
        await _grant(login.user, "dead_letter_entry")
        granted = await receive_until(ws, lambda m: "Dead-letter" in m, timeout=3.0)
        assert 'id="pending-table"' in granted
        assert broadcaster.sockets() == 1, "re-attached, not doubled"
        await _revoke(login.user, "dead_letter_entry")
        await receive_until(
            ws, lambda m: 'id="pending-table"' in m and "Dead-letter" not in m, timeout=3.0
        )
        # The socket stays open and follows the stream under its new permission set.
        (new_id,) = make_pending(r, stream, "billing", "w2", 1, create=False)
        update = await receive_until(ws, lambda m: new_id in m)
        assert "Dead-letter" not in update
        await ws.disconnect()
        assert broadcaster.sockets() == 0


class LongLivedSocketTests:
    async def test_logout_is_heard_past_the_layers_group_expiry(
        self,
        broadcaster: Broadcaster,
        login_as: LoginAs,
        r: redis.Redis,
        stream: str,
        live_settings: Any,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # A day of group_expiry, shrunk to a second; the re-join every hour, to 0.3 s. A
        # recheck far away: only the logout notice can close the socket in time.
        live_settings.ACKBOARD_LIVE_RECHECK = 60.0
        monkeypatch.setattr(get_channel_layer(), "group_expiry", 1)
        monkeypatch.setattr(session, "REJOIN_S", 0.3)
        login = await login_as("view_queues")
        ws = await _open_group_socket(login, r, stream)
        await asyncio.sleep(2.5)  # past the 1 s group expiry: Redis forgot the group
        (new_id,) = make_pending(r, stream, "billing", "w2", 1, create=False)
        await receive_until(ws, lambda m: new_id in m)
        await sync_to_async(login.client.logout)()
        code, took = await _closed_with(ws, timeout=2.0)
        assert code == session.CLOSE_LOGIN
        assert took < 1.0
