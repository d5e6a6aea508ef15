"""The broadcaster among hostile events: whatever anyone PUBLISHes on the events channel,
its subscription goes on, and an unreadable event is logged at most once a minute.

``on_event`` is fed hostile JSON directly (hypothesis, 100 inputs); then a running
broadcaster gets deep JSON by a real PUBLISH and must still hear the good event after it.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis
from hypothesis import given, settings

from dashboard.live.broadcaster import Broadcaster
from queue_core.keys import EVENTS_CHANNEL
from tests.dashboard.live.sockets import events_subscribed
from tests.hostile_json import hostile_json
from tests.waiting import wait_until_async

pytestmark = pytest.mark.django_db(transaction=True)

DEEP = ["[" * 1000 + "]" * 1000, '{"type": "rates", "at": ' + "[" * 100_000, "{" * 5000]


class OnEventTests:
    @settings(max_examples=100, deadline=None)
    @given(raw=hostile_json())
    def test_hostile_events_are_ignored_quietly(self, raw: str) -> None:
        broadcaster = Broadcaster()
        broadcaster.on_event(raw)
        broadcaster.on_event(raw.encode())
        assert broadcaster.counters.events == 0

    def test_an_unreadable_event_is_logged_once_a_minute(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        broadcaster = Broadcaster()
        with caplog.at_level(logging.WARNING, logger="ackboard.live"):
            for raw in DEEP * 20:
                broadcaster.on_event(raw)
        [line] = [rec.getMessage() for rec in caplog.records]
        assert "not readable JSON (nested deeper than 64 levels)" in line

    def test_a_failure_in_handling_one_event_costs_that_event_only(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        broadcaster = Broadcaster()

        def broken(raw: Any) -> None:
            raise RuntimeError("a bug an event found")

        monkeypatch.setattr(broadcaster, "on_event", broken)
        with caplog.at_level(logging.ERROR, logger="ackboard.live"):
            for _ in range(50):
                broadcaster._event_guarded(b"{}")
        assert len(caplog.records) == 1 and "handling an event failed" in caplog.records[0].message


class SubscriptionTests:
    async def test_deep_json_published_leaves_the_subscription_listening(
        self, broadcaster: Broadcaster, r: redis.Redis
    ) -> None:
        broadcaster._ensure_running()
        await events_subscribed(r)
        for raw in DEEP:
            r.publish(EVENTS_CHANNEL, raw)
        r.publish(EVENTS_CHANNEL, '{"type": "rates", "at": 1234.5}')
        # Heard the good event after the bad ones.
        await wait_until_async(lambda: broadcaster._rates_at == 1234.5, what="the good event")
        events_task = next(t for t in broadcaster._tasks if t.get_name() == "ackboard-live-events")
        assert not events_task.done()
