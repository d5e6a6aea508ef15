"""The alert sender: each tick, judge ``RULES`` and post what breaches to the webhooks.

Owns the tick, the cool-down and the loop ``manage.py send_alerts`` runs. Why a command
of its own and not a step of the rates sampler's tick: a tick here waits on receivers
(up to ``ACKBOARD_ALERTS_TIMEOUT_S`` each), and the sampler's ticks must keep their
interval, or the rates history they write (which the rate rules read) would skew; so
the sender runs beside the sampler, with a lease of the same shape
(``dashboard.insight.rates.sampler.Lease`` on ``ACKBOARD_ALERTS_KEY:sender``): any number of
``send_alerts`` processes, one sends.

**State** is one Redis hash (``ACKBOARD_ALERTS_KEY:state``): when each (rule, stream, group)'s
condition began (a breach is a condition held for its rule's ``for_s``, as Prometheus's
``for:``), and when each webhook was last sent that breach. A webhook gets a breach once,
then again only after its ``cooldown_s`` while the breach lasts; when the condition
clears, both fields go, so the next breach is sent afresh. Kept in Redis, so a restart
or a new lease holder resends nothing. A receiver that fails (refused, timed out, not
2xx) is logged and not recorded, so it is retried next tick; it is skipped for the rest
of that tick, so a dead receiver costs one timeout a tick, not one per breach.

**A tick** (every ``ACKBOARD_ALERTS_INTERVAL_S``, 30 s by default): the lease (one round
trip); /metrics' gauges (one collection, ``dashboard.views.ops.gauge_families``); one
indexed read of the last ``WINDOW_S`` of the sampler's tier-0 rows; HGETALL and one
pipelined write of the state; one query of the enabled webhooks; at most
``SENDS_PER_WEBHOOK`` POSTs per webhook (the rest wait for the next tick).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import close_old_connections, connections
from redis.exceptions import RedisClusterException

from dashboard.alerts.delivery import body_for, webhook_post
from dashboard.alerts.models import AlertWebhook
from dashboard.alerts.rules import WINDOW_S, Breach, Readings, Sample, Series, conditions
from dashboard.insight.rates.models import RateSample
from dashboard.insight.rates.sampler import Lease
from dashboard.runtime.connection import get_redis
from dashboard.views.ops import gauge_families
from queue_core import clock
from queue_core.bounded_json import json_read
from queue_core.connection import Client

log = logging.getLogger("dashboard.alerts")

#: Most POSTs to one webhook in one tick.
SENDS_PER_WEBHOOK = 50
#: Most streams whose history is read by name (beyond, the whole window is read).
HISTORY_IN_MAX = 500


def readings_read(*, client: Client, now_ms: int) -> Readings:
    """The gauges (labels ``stream`` and ``group``, "" when absent) and the sampler's
    tier-0 rows of the last ``WINDOW_S``, per series in time order."""
    gauges: dict[str, dict[Series, float]] = defaultdict(dict)
    for family in gauge_families(client=client, now_ms=now_ms):
        for sample in family.samples:
            labels = sample.labels
            series = (labels.get("stream", ""), labels.get("group", ""))
            gauges[sample.name][series] = float(sample.value)
    history: dict[Series, list[Sample]] = defaultdict(list)
    recent = RateSample.objects.filter(tier=0, at__gte=now_ms / 1000 - WINDOW_S)
    # Only a stream with lag or dead letters can meet a rule over a window: read its rows
    # alone (all rows past a bound, where the IN list would cost more than it saves).
    candidates = {
        stream
        for name in ("ackboard_group_lag", "ackboard_stream_dead_letter_length")
        for (stream, _), value in gauges[name].items()
        if value > 0
    }
    if len(candidates) <= HISTORY_IN_MAX:
        recent = recent.filter(stream__in=candidates)
    rows = recent.order_by("at").values_list(
        "stream", "group", "at", "lag", "entries_read", "dead_letters"
    )
    for stream, group, at, lag, read, dead in rows:
        history[(stream, group)].append(Sample(at, lag, read, dead))
    return Readings(gauges=gauges, history=history)


def _field(*parts: object) -> str:
    return json.dumps(parts)


@dataclass(frozen=True, slots=True)
class AlertTick:
    """What one tick did (None from ``tick`` when another sender holds the lease)."""

    conditions: int  # (rule, series) meeting their condition now
    firing: int  # of those, held for their rule's for_s
    sent: int
    failed: int


class AlertSender:
    """One sender loop's state: its lease and its state key."""

    def __init__(
        self,
        *,
        client: Client | None = None,
        interval_s: float | None = None,
        lease_key: str | None = None,
        state_key: str | None = None,
    ) -> None:
        base = str(settings.ACKBOARD_ALERTS_KEY)
        self.client = client if client is not None else get_redis()
        self.interval_s = float(interval_s or settings.ACKBOARD_ALERTS_INTERVAL_S)
        ttl_ms = max(1000, int(3000 * self.interval_s))
        self.lease = Lease(self.client, ttl_ms=ttl_ms, key=lease_key or f"{base}:sender")
        self.state_key = state_key or f"{base}:state"

    def tick(self) -> AlertTick | None:
        """Judge every rule once and send what is due, if this loop holds the lease."""
        if not self.lease.hold():
            return None
        now_ms = clock.now_ms()
        current = conditions(readings_read(client=self.client, now_ms=now_ms), now_ms / 1000)
        since, sent = self._state_update(current, now_ms)
        firing = [
            b
            for b in current
            if now_ms - since[(b.rule.name, b.stream, b.group)] >= b.rule.for_s * 1000
        ]
        done = failed = 0
        for webhook in AlertWebhook.objects.filter(enabled=True):
            n, bad = self._send_to(webhook, firing, sent, now_ms)
            done, failed = done + n, failed + bad
        return AlertTick(len(current), len(firing), done, failed)

    def _state_update(
        self, current: list[Breach], now_ms: int
    ) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, ...], int]]:
        """Each condition's start (new ones start now) and each webhook's last send, after
        forgetting the conditions that cleared: one HGETALL, one pipelined write."""
        raw = self.client.hgetall(self.state_key)
        since: dict[tuple[str, str, str], int] = {}
        sent: dict[tuple[str, ...], int] = {}
        for raw_field, value in raw.items():
            kind, *parts = (str(p) for p in json_read(raw_field))  # our own keys, bounded anyway
            if kind == "since" and len(parts) == 3:
                since[(parts[0], parts[1], parts[2])] = int(value)
            elif kind == "sent":
                sent[tuple(parts)] = int(value)
        active = {(b.rule.name, b.stream, b.group) for b in current}
        pipe = self.client.pipeline(transaction=False)
        for series in set(since) - active:
            pipe.hdel(self.state_key, _field("since", *series))
            del since[series]
        for done in [k for k in sent if (k[0], k[1], k[2]) not in active]:
            pipe.hdel(self.state_key, _field("sent", *done))
            del sent[done]
        for series in active - set(since):
            since[series] = now_ms
            pipe.hset(self.state_key, _field("since", *series), now_ms)
        pipe.execute()
        return since, sent

    def _send_to(
        self,
        webhook: AlertWebhook,
        firing: list[Breach],
        sent: dict[tuple[str, ...], int],
        now_ms: int,
    ) -> tuple[int, int]:
        """Post each firing breach this webhook is due (never sent this breach, or not
        within its cool-down); stop at its first failure. (sent, failed)."""
        done = 0
        for breach in firing:
            key = (breach.rule.name, breach.stream, breach.group, str(webhook.pk))
            last = sent.get(key)
            if last is not None and now_ms - last < webhook.cooldown_s * 1000:
                continue
            if done >= SENDS_PER_WEBHOOK:
                break
            answer = webhook_post(webhook.url, body_for(webhook.kind, breach))
            if not answer.ok:
                log.warning(
                    "alert webhook %r did not take %s for %s/%s (retried next tick): %s",
                    webhook.name, breach.rule.name, breach.stream, breach.group, answer.text,
                )  # fmt: skip
                return done, 1
            self.client.hset(self.state_key, _field("sent", *key), now_ms)
            done += 1
        return done, 0

    def stop(self) -> None:
        try:
            self.lease.release()
        except (redis.RedisError, RedisClusterException):
            log.warning("could not release the alert sender's lease; it expires by itself")


def run_loop(stop: threading.Event, sender: AlertSender | None = None) -> None:
    """Tick every interval until ``stop`` is set; Redis errors back off and retry, a bug
    or a database error is logged and the loop goes on."""
    failures = 0
    while not stop.is_set():
        began = time.monotonic()
        try:
            close_old_connections()
            if sender is None:
                sender = AlertSender()
            sender.tick()
            failures = 0
            pause = max(sender.interval_s - (time.monotonic() - began), 0.1)
        except (redis.RedisError, RedisClusterException) as exc:
            failures += 1
            pause = min(60.0, float(settings.ACKBOARD_ALERTS_INTERVAL_S) * 2**failures)
            log.warning("alert sender tick failed (retrying in %.1fs): %s", pause, exc)
        except Exception:
            log.exception("alert sender tick failed")
            pause = 10.0
        close_old_connections()
        stop.wait(pause)
    if sender is not None:
        sender.stop()
    connections.close_all()
