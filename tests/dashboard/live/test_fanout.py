"""Fan-out at scale: what N sockets of one process cost, and that none waits for another.

- the session recheck is one batch per tick for every socket (O(1) SQL queries, however
  many sockets and sessions), answers exactly like the per-session reference rule, and a
  logout still closes exactly its own session's sockets, heard through one subscription
  per session (more tabs of a session cost Redis nothing);
- a surface is rendered once per permission set per change, whatever the socket count;
- each socket's outbox keeps only the newest state of each partial, so a slow socket
  skips states for itself alone and never delays the others, and always gets the last one.

Real Redis (the private test server), real database, sockets through the real ASGI app.
"""

from __future__ import annotations

import asyncio
import time
from importlib import import_module
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, Permission, User
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from dashboard.live import broadcaster as broadcaster_module
from dashboard.live import session
from dashboard.live.broadcaster import Broadcaster
from dashboard.live.outbox import Outbox
from dashboard.live.registry import Surface
from dashboard.live.render import surface_render
from dashboard.routing import live_path
from tests.dashboard.live.sockets import SITE_HEADERS, live_socket, receive_until
from tests.dashboard.test_channel_layer import _layer_config
from tests.factories import add_entries, make_pending
from tests.waiting import wait_until_async

pytestmark = pytest.mark.django_db(transaction=True)

VIEW = "dashboard.view_queues"


def _perm(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label="dashboard", codename=codename)


def _login(user: User) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def _user(name: str, *codenames: str, **fields: Any) -> User:
    user = User.objects.create_user(name, password="pw", **fields)
    user.user_permissions.add(*(_perm(c) for c in codenames))
    return user


def _pairs(*users: User) -> list[tuple[str, Any]]:
    return [(_login(u), u.pk) for u in users]


class BatchedCheckTests:
    def test_answers_like_the_per_session_rule(self, settings: Any) -> None:
        operator = _user("operator", "view_queues", "dead_letter_entry")
        crew = Group.objects.create(name="crew")
        crew.permissions.add(_perm("view_queues"), _perm("retry_entry"))
        member = _user("member")
        member.groups.add(crew)
        boss = _user("boss", is_superuser=True)
        no_view = _user("no-view", "retry_entry")
        pairs = _pairs(operator, member, boss, no_view)
        gone = _user("gone", "view_queues")
        inactive = _user("inactive", "view_queues")
        moved = _user("moved", "view_queues")
        deleted_session = _user("deleted-session", "view_queues")
        ended = _pairs(gone, inactive, moved, deleted_session)
        gone.delete()
        inactive.is_active = False
        inactive.save()
        moved.set_password("a new password")
        moved.save()
        # e.g. an admin clearing it, or its expiry: the engine's own delete
        import_module(settings.SESSION_ENGINE).SessionStore().delete(ended[3][0])
        assert not Session.objects.filter(session_key=ended[3][0]).exists()
        wrong_user = (pairs[0][0], member.pk)  # a session of someone else
        unknown = ("no-such-session-key-0123456789ab", operator.pk)
        every = [*pairs, *ended, wrong_user, unknown]

        batched = session.sessions_perms(sockets=every)

        reference = {
            (key, uid): session.session_perms(session_key=key, user_id=uid) for key, uid in every
        }
        assert batched == reference
        # and the answers are the expected ones, not merely equal
        assert batched[pairs[0]] == frozenset(
            {"dashboard.view_queues", "dashboard.dead_letter_entry"}
        )
        assert batched[pairs[1]] == frozenset({"dashboard.view_queues", "dashboard.retry_entry"})
        assert isinstance(batched[pairs[2]], frozenset) and VIEW in batched[pairs[2]]
        assert batched[pairs[3]] == session.CLOSE_FORBIDDEN
        assert [batched[p] for p in ended] == [session.CLOSE_LOGIN] * 4
        assert batched[wrong_user] == batched[unknown] == session.CLOSE_LOGIN

    def test_a_deleted_row_ends_the_socket(self) -> None:
        """A logout deletes the session's row: its sockets close at the next re-check."""
        user = _user("left", "view_queues")
        (pair,) = _pairs(user)
        Session.objects.filter(session_key=pair[0]).delete()  # the row alone
        assert session.sessions_perms(sockets=[pair]) == {pair: session.CLOSE_LOGIN}

    def test_costs_the_same_queries_for_3_or_30_sessions(self) -> None:
        def queries(n: int) -> int:
            users = [_user(f"u{n}-{i}", "view_queues") for i in range(n)]
            pairs = _pairs(*users)
            pairs += [(key, uid) for key, uid in pairs]  # two sockets per session
            with CaptureQueriesContext(connection) as captured:
                verdicts = session.sessions_perms(sockets=pairs)
            assert all(v == frozenset({VIEW}) for v in verdicts.values())
            return len(captured)

        few, many = queries(3), queries(30)
        assert few == many
        assert many <= 4, "sessions, users, their permissions and their groups' permissions"


# --- the watch over live sockets ------------------------------------------------------------


@pytest.fixture
def counted_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The SQL queries of each batched recheck (counted in the thread that runs it)."""
    counts: list[int] = []
    real = session.sessions_perms

    def counting(*, sockets: Any) -> Any:
        with CaptureQueriesContext(connection) as captured:
            verdicts = real(sockets=sockets)
        counts.append(len(captured))
        return verdicts

    monkeypatch.setattr(session, "sessions_perms", counting)
    return counts


async def _headers(user: User) -> list[tuple[bytes, bytes]]:
    key = await sync_to_async(_login)(user)
    return [(b"cookie", f"sessionid={key}".encode()), *SITE_HEADERS]


async def _closed(ws: Any, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        message = await ws.receive_output(timeout=left)
        if message["type"] == "websocket.close":
            return int(message["code"])
    raise AssertionError("still open")


class SessionWatchTests:
    async def test_recheck_is_one_batch_for_every_socket(
        self,
        broadcaster: Broadcaster,
        live_settings: Any,
        counted_checks: list[int],
        r: redis.Redis,
        stream: str,
    ) -> None:
        live_settings.ACKBOARD_LIVE_RECHECK = 0.3
        make_pending(r, stream, "billing", "w1", 1)
        users = [
            await sync_to_async(_user)(f"watch{i}", "view_queues") for i in range(4)
        ]  # fmt: skip
        path = live_path("group", stream=stream, group="billing")
        sockets = []
        for user in users:
            headers = await _headers(user)
            for _ in range(6):  # 6 sockets per session, 24 in all
                ws = live_socket(path, headers)
                assert (await ws.connect())[0]
                sockets.append(ws)
        assert session.session_watch().sessions() == 4
        counted_checks.clear()
        await asyncio.sleep(1.5)  # the checks over this time are the figure
        # One check per recheck period (about 5 in 1.5 s), not one per socket (120).
        assert 2 <= len(counted_checks) <= 6, counted_checks
        assert max(counted_checks) <= 4, "O(1) queries for 24 sockets of 4 sessions"
        assert broadcaster.sockets() == 24, "nothing was closed"
        for ws in sockets:
            await ws.disconnect()
        assert session.session_watch().sessions() == 0

    async def test_logout_closes_exactly_that_sessions_sockets(
        self, broadcaster: Broadcaster, live_settings: Any, r: redis.Redis, stream: str
    ) -> None:
        live_settings.ACKBOARD_LIVE_RECHECK = 60.0  # only the notice can close in time
        make_pending(r, stream, "billing", "w1", 1)
        user = await sync_to_async(_user)("twice", "view_queues")
        leaving, staying = Client(), Client()
        await sync_to_async(leaving.force_login)(user)
        await sync_to_async(staying.force_login)(user)
        path = live_path("group", stream=stream, group="billing")

        def headers(client: Client) -> list[tuple[bytes, bytes]]:
            return [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())] + [
                *SITE_HEADERS
            ]

        gone = [live_socket(path, headers(leaving)) for _ in range(3)]
        kept = [live_socket(path, headers(staying)) for _ in range(2)]
        for ws in [*gone, *kept]:
            assert (await ws.connect())[0]
            await receive_until(ws, lambda m: 'id="pending-table"' in m)
        await sync_to_async(leaving.logout)()
        started = time.monotonic()
        for ws in gone:
            assert await _closed(ws, timeout=2.0) == session.CLOSE_LOGIN
        assert time.monotonic() - started < 1.5
        (new_id,) = make_pending(r, stream, "billing", "w2", 1, create=False)
        for ws in kept:
            await receive_until(ws, lambda m: new_id in m)
        assert broadcaster.sockets() == 2
        for ws in kept:
            await ws.disconnect()

    async def test_one_notice_subscription_per_session_not_per_socket(
        self,
        broadcaster: Broadcaster,
        live_settings: Any,
        r: redis.Redis,
        stream: str,
        redis_url: str,
        prefix: str,
    ) -> None:
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
        make_pending(r, stream, "billing", "w1", 1)
        user = await sync_to_async(_user)("tabs", "view_queues")
        headers = await _headers(user)
        path = live_path("group", stream=stream, group="billing")
        key = headers[0][1].decode().split("=", 1)[1]
        group_channel = f"{config['prefix']}__group__{session.session_group(key)}"
        sockets = [live_socket(path, headers) for _ in range(8)]
        assert (await sockets[0].connect())[0]
        await wait_until_async(
            lambda: dict(r.pubsub_numsub(group_channel))[group_channel.encode()] == 1,
            what="the session group subscribed",
        )
        subscribed = _calls(r, "subscribe")
        for ws in sockets[1:]:
            assert (await ws.connect())[0]
            await receive_until(ws, lambda m: 'id="pending-table"' in m)
        await asyncio.sleep(0.3)  # a window for any (wrong) subscription the new tabs cause
        assert _calls(r, "subscribe") == subscribed, "7 more tabs of the session: none"
        for ws in sockets:
            await ws.disconnect()


def _calls(r: redis.Redis, command: str) -> int:
    stats = r.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


# --- rendering and the outboxes ---------------------------------------------------------------


@pytest.fixture
def counted_renders(monkeypatch: pytest.MonkeyPatch) -> list[frozenset[str]]:
    """The permission set of each partial rendering the broadcaster makes."""
    renders: list[frozenset[str]] = []
    real = surface_render

    def counting(*, surface: Surface, context: Any, perms: frozenset[str]) -> Any:
        renders.append(perms)
        return real(surface=surface, context=context, perms=perms)

    monkeypatch.setattr(broadcaster_module, "surface_render", counting)
    return renders


class Recorder:
    """A socket's send as the outbox sees it: records, and can be made to hang."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def send(self, html: str) -> None:
        await self.gate.wait()
        self.sent.append((time.monotonic(), html))

    def has(self, text: str) -> bool:
        return any(text in html for _, html in self.sent)


class FanOutTests:
    async def test_one_rendering_per_permission_set_for_60_sockets(
        self,
        broadcaster: Broadcaster,
        counted_renders: list[frozenset[str]],
        r: redis.Redis,
        stream: str,
    ) -> None:
        make_pending(r, stream, "billing", "w1", 1)
        surface = Surface("group", stream=stream, group="billing")
        readers, operators = frozenset({VIEW}), frozenset({VIEW, "dashboard.retry_entry"})
        recorders = [Recorder() for _ in range(60)]
        outboxes = [Outbox(rec.send) for rec in recorders]
        for i, outbox in enumerate(outboxes):
            broadcaster.attach(surface, readers if i % 2 else operators, outbox)
        await wait_until_async(lambda: all(rec.sent for rec in recorders))
        counted_renders.clear()
        renders = broadcaster.counters.renders
        (new_id,) = make_pending(r, stream, "billing", "w2", 1, create=False)
        await wait_until_async(lambda: all(rec.has(new_id) for rec in recorders))
        assert broadcaster.counters.renders - renders == 1, "one context per change"
        assert sorted(counted_renders, key=len) == [readers, operators], "one per set"
        pushed = {rec.sent[-1][1] for rec in recorders}
        assert len(pushed) == 2, "every socket of a set gets the same bytes"
        for i, outbox in enumerate(outboxes):
            broadcaster.detach(surface, readers if i % 2 else operators, outbox)
            await outbox.close()

    async def test_a_slow_socket_delays_no_other_and_gets_the_latest_state(
        self, broadcaster: Broadcaster, r: redis.Redis, stream: str
    ) -> None:
        add_entries(r, stream, 1)
        surface = Surface("stream", stream=stream)
        perms = frozenset({VIEW})
        slow, fast = Recorder(), [Recorder() for _ in range(20)]
        outboxes = [Outbox(rec.send) for rec in [slow, *fast]]
        for outbox in outboxes:
            broadcaster.attach(surface, perms, outbox)
        await wait_until_async(lambda: all(rec.sent for rec in [slow, *fast]))
        slow.gate.clear()  # from now on its sends hang, like a client that stopped reading
        ids = []
        for _ in range(4):
            (new_id,) = add_entries(r, stream, 1)
            ids.append(new_id)
            written = time.monotonic()
            await wait_until_async(lambda new_id=new_id: all(rec.has(new_id) for rec in fast))
            assert time.monotonic() - written < 2.0
        assert not slow.has(ids[0])
        assert outboxes[0].pending() <= 3, "at most one pending HTML per partial"
        assert outboxes[0].skipped >= 1, "states in between are skipped for it alone"
        slow.gate.set()
        await wait_until_async(lambda: slow.has(ids[-1]))
        latest = slow.sent[-1][1]
        assert ids[-1] in latest, "the final state is never skipped"
        assert all(ids[-1] in rec.sent[-1][1] for rec in fast)
        for outbox in outboxes:
            broadcaster.detach(surface, perms, outbox)
            await outbox.close()
        assert broadcaster.sockets() == 0


class OutboxTests:
    async def test_newer_html_of_a_partial_replaces_the_pending_one(self) -> None:
        rec = Recorder()
        rec.gate.clear()
        outbox = Outbox(rec.send)
        outbox.offer({"a": "<div id=a>1</div>"})
        # The sender took "a"=1 and hangs in its send.
        await wait_until_async(lambda: outbox.pending() == 0, what="the sender to take it")
        outbox.offer({"a": "<div id=a>2</div>", "b": "<div id=b>1</div>"})
        outbox.offer({"a": "<div id=a>3</div>"})
        assert outbox.pending() == 2 and outbox.skipped == 1
        rec.gate.set()
        await wait_until_async(lambda: len(rec.sent) == 2)
        assert [html for _, html in rec.sent] == [
            "<div id=a>1</div>",
            "<div id=a>3</div><div id=b>1</div>",
        ]
        await outbox.close()
        outbox.offer({"a": "late"})
        assert outbox.pending() == 0, "nothing is queued after the close"
