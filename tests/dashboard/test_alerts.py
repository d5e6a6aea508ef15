"""Alert webhooks: the rules (pure, and equal to the shipped Prometheus rules), the sender
against the private Redis and a real HTTP receiver (one POST per breach, the cool-down,
restarts, both shapes, receivers that fail), and the admin (audit rows, the test button).

The receiver is ``http.server`` on a free loopback port in a thread, recording every
request before it answers, so a tick that returned has its POSTs recorded. Time is the
frozen ``queue_core.clock``; entry ids are written from it (``entry_id_at``).
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from redis.backoff import NoBackoff
from redis.retry import Retry

from dashboard.alerts.delivery import TEST_BREACH, generic_body, slack_body
from dashboard.alerts.models import AlertWebhook
from dashboard.alerts.rules import RULES, Breach, Readings, Sample, conditions
from dashboard.alerts.sender import AlertSender, readings_read, run_loop
from dashboard.insight.rates.models import RateSample
from dashboard.models import AuditEvent
from queue_core.keys import stream_keys
from tests.clock import FrozenClock
from tests.factories import make_group, make_user
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0
NO_LIVE = "AckboardNoLiveConsumer"


class Receiver:
    """A real HTTP server recording each POST's path and JSON body; answers ``status``."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def rules(self, name: str) -> list[dict[str, Any]]:
        return [b for b in self.bodies if b.get("rule") == name or name in b.get("text", "")]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/nobody"


# --- the rules ---------------------------------------------------------------------------------


def _judge(gauges: dict[str, Any], history: dict[Any, list[Sample]] | None = None) -> set[str]:
    found = conditions(Readings(gauges=gauges, history=history or {}), NOW)
    return {b.rule.name for b in found}


G = ("s", "g")


class RuleTests:
    def test_stalled_needs_waiting_entries_and_no_reads_over_the_window(self) -> None:
        flat = [Sample(NOW - 200, entries_read=7), Sample(NOW - 10, entries_read=7)]
        moving = [Sample(NOW - 200, entries_read=7), Sample(NOW - 10, entries_read=8)]
        lag = {"ackboard_group_lag": {G: 5}}
        assert "AckboardGroupStalled" in _judge(lag, {G: flat})
        assert "AckboardGroupStalled" not in _judge(lag, {G: moving})
        assert "AckboardGroupStalled" not in _judge(lag, {G: flat[1:]})  # one sample: no rate
        assert "AckboardGroupStalled" not in _judge({"ackboard_group_lag": {G: 0}}, {G: flat})

    def test_lag_growing_over_the_threshold(self) -> None:
        rising = [Sample(NOW - 200, lag=120), Sample(NOW - 100, lag=140)]
        falling = [Sample(NOW - 200, lag=400), Sample(NOW - 100, lag=300)]
        assert "AckboardLagGrowing" in _judge({"ackboard_group_lag": {G: 150}}, {G: rising})
        assert "AckboardLagGrowing" not in _judge({"ackboard_group_lag": {G: 200}}, {G: falling})
        assert "AckboardLagGrowing" not in _judge({"ackboard_group_lag": {G: 90}}, {G: rising})

    def test_gauges_over_their_thresholds(self) -> None:
        gauges = {
            "ackboard_group_oldest_undelivered_age_seconds": {G: 301, ("s", "h"): 300},
            "ackboard_group_no_live_consumer": {G: 1, ("s", "h"): 0},
            "ackboard_rates_sample_age_seconds": {("", ""): 121},
        }
        found = conditions(Readings(gauges=gauges), NOW)
        assert [(b.rule.name, b.stream, b.group, b.value) for b in found] == [
            ("AckboardOldestUndeliveredTooOld", "s", "g", 301),
            ("AckboardNoLiveConsumer", "s", "g", 1),
            ("AckboardRatesSamplerStopped", "", "", 121),
        ]

    def test_dead_letters_growing_against_the_window_start(self) -> None:
        gauge = {"ackboard_stream_dead_letter_length": {("s", ""): 5}}
        grew = {("s", ""): [Sample(NOW - 800, dead_letters=3), Sample(NOW - 10, dead_letters=4)]}
        same = {("s", ""): [Sample(NOW - 800, dead_letters=5)]}
        found = conditions(Readings(gauges=gauge, history=grew), NOW)
        assert [(b.rule.name, b.value) for b in found] == [("AckboardDeadLettersGrowing", 2)]
        assert _judge(gauge, same) == set()

    def test_the_rules_are_the_shipped_prometheus_rules(self) -> None:
        shipped = yaml.safe_load((ROOT / "deploy/prometheus/ackboard-alerts.yml").read_text())
        by_name = {r["alert"]: r for group in shipped["groups"] for r in group["rules"]}
        assert {rule.name for rule in RULES} == set(by_name)
        units = {"m": 60, "s": 1}
        for rule in RULES:
            prom = by_name[rule.name]
            assert rule.for_s == int(prom["for"][:-1]) * units[prom["for"][-1]], rule.name
            assert rule.severity == prom["labels"]["severity"], rule.name
            bounds = re.findall(r"(?:>|==)\s*(\d+)", prom["expr"])
            assert f"{rule.threshold:g}" in bounds, rule.name
            windows = re.findall(r"\[(\d+)m\]", prom["expr"])
            assert rule.window_s == (int(windows[0]) * 60 if windows else 0), rule.name

    def test_slack_text_escapes_names(self) -> None:
        breach = Breach(RULES[4], "<!channel>&", "g", 1)
        text = slack_body(breach)["text"]
        assert "<!channel>" not in text and "&lt;!channel&gt;&amp;" in text
        assert generic_body(breach)["stream"] == "<!channel>&"


# --- the sender --------------------------------------------------------------------------------


@pytest.fixture
def world(settings: Any, redis_url: str, prefix: str, r: redis.Redis, clock: FrozenClock) -> str:
    """A stream whose group nobody has joined, its entries added 10 minutes ago: entries
    wait with no live consumer (for 2 min) and undelivered for too long (for 5 min)."""
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_ALERTS_BASE_URL = "https://ackboard.example"
    stream = prefix + "orders"
    for seq in range(3):
        r.xadd(stream, {"n": str(seq)}, id=clock.entry_id_at(600_000, seq))
    make_group(r, stream, "g")
    return stream


def _sender(r: redis.Redis, prefix: str) -> AlertSender:
    return AlertSender(
        client=r, interval_s=30, lease_key=prefix + "alerts:lease", state_key=prefix + "alerts"
    )


def _hook(url: str, kind: str = "generic", cooldown_s: int = 600, name: str = "ops") -> Any:
    return AlertWebhook.objects.create(name=name, url=url, kind=kind, cooldown_s=cooldown_s)


class SenderTests:
    def test_one_alert_per_breach_and_cool_down(
        self,
        world: str,
        r: redis.Redis,
        prefix: str,
        clock: FrozenClock,
        receiver: Receiver,
    ) -> None:
        _hook(receiver.url)
        sender = _sender(r, prefix)
        seen = []

        def tick(advance_s: float) -> None:
            clock.advance(s=advance_s)
            assert sender.tick() is not None
            seen.append(len(receiver.rules(NO_LIVE)))

        tick(0)  # the condition begins
        tick(120)  # held for its 2 minutes: sent
        tick(60)  # within the cool-down
        sender.stop()  # a restart (and a new lease holder) resends nothing
        sender = _sender(r, prefix)
        tick(60)
        tick(480)  # 600 s after the first: sent again while the breach lasts
        r.xreadgroup("g", "c", {world: ">"})  # a live consumer: cleared
        tick(30)
        r.xgroup_delconsumer(world, "g", "c")
        r.xadd(world, {"n": "again"}, id=clock.entry_id_at(60_000))  # waited the window
        tick(30)  # a new breach begins
        tick(120)  # and is sent afresh
        assert seen == [0, 1, 1, 1, 2, 2, 2, 3]
        body = receiver.rules(NO_LIVE)[0]
        assert body["stream"] == world and body["group"] == "g" and body["value"] == 1
        assert body["threshold"] == 1 and body["test"] is False
        assert body["link"] == f"https://ackboard.example/streams/{world}/groups/g/"
        assert len(receiver.rules("AckboardOldestUndeliveredTooOld")) == 1  # held 5 min once

    def test_slack_and_generic_shapes(
        self, world: str, r: redis.Redis, prefix: str, clock: FrozenClock, receiver: Receiver
    ) -> None:
        _hook(receiver.url, "slack", name="slack")
        _hook(receiver.url + "?generic", name="generic")
        sender = _sender(r, prefix)
        sender.tick()
        clock.advance(s=120)
        report = sender.tick()
        assert report is not None and report.sent == 2 and report.failed == 0
        slack = [b for b in receiver.bodies if "text" in b]
        generic = [b for b in receiver.bodies if "rule" in b]
        assert len(slack) == len(generic) == 1
        assert set(slack[0]) == {"text"}
        assert slack[0]["text"].startswith(f"*{NO_LIVE}* (critical): {world}/g has no live")
        assert (
            f"<https://ackboard.example/streams/{world}/groups/g/|Open in Ackboard>"
            in (slack[0]["text"])
        )
        assert {"rule", "stream", "group", "value", "threshold", "link"} <= set(generic[0])

    def test_a_receiver_down_is_logged_and_retried_next_tick(
        self,
        world: str,
        r: redis.Redis,
        prefix: str,
        clock: FrozenClock,
        receiver: Receiver,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        _hook(_closed_port_url(), name="gone")
        _hook(receiver.url, name="flaky")
        receiver.status = 503
        sender = _sender(r, prefix)
        sender.tick()
        clock.advance(s=120)
        with caplog.at_level(logging.WARNING, logger="dashboard.alerts"):
            report = sender.tick()
        assert report is not None and report.sent == 0 and report.failed == 2
        logged = " ".join(rec.getMessage() for rec in caplog.records)
        assert "'gone' did not take AckboardNoLiveConsumer" in logged
        assert "'flaky' did not take AckboardNoLiveConsumer" in logged and "HTTP 503" in logged
        assert len(receiver.bodies) == 1  # the failed one stops that webhook's tick
        receiver.status = 200
        clock.advance(s=10)
        report = sender.tick()
        assert report is not None and report.sent == 1 and report.failed == 1
        assert [b["rule"] for b in receiver.bodies] == [NO_LIVE, NO_LIVE]


class _CountedSender(AlertSender):
    """The real sender, counting its ticks so a test can wait for the loop's third."""

    def __init__(self, *args: Any, fail_first: BaseException | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.ticks = 0
        self.fail_first = fail_first

    def tick(self) -> Any:
        self.ticks += 1
        if self.fail_first is not None:
            error, self.fail_first = self.fail_first, None
            raise error
        return super().tick()


def _looping(sender: AlertSender) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=run_loop, args=(stop, sender), daemon=True)
    thread.start()
    return stop, thread


def _stopped(stop: threading.Event, thread: threading.Thread) -> None:
    """Stop the loop; it ends within a second, whatever pause it was in."""
    stop.set()
    thread.join(1.0)
    assert not thread.is_alive(), "the loop did not stop within a second"


@pytest.mark.django_db(transaction=True)  # the loop's thread reads the webhook row
class LoopTests:
    def test_the_loop_sends_once_per_breach_then_stops_and_releases_its_lease(
        self, world: str, r: redis.Redis, prefix: str, clock: FrozenClock, receiver: Receiver
    ) -> None:
        _hook(receiver.url)
        sender = _CountedSender(
            client=r, interval_s=0.05, lease_key=prefix + "lease", state_key=prefix + "alerts"
        )
        assert sender.tick() is not None  # the condition begins
        clock.advance(s=120)  # and has held for its 2 minutes
        stop, thread = _looping(sender)
        wait_until(lambda: sender.ticks >= 5, timeout=10, what="four ticks of the loop")
        _stopped(stop, thread)
        assert len(receiver.rules(NO_LIVE)) == 1  # sent once, then within its cool-down
        assert r.exists(prefix + "lease") == 0

    def test_redis_errors_back_off_doubling_and_a_bug_does_not_end_the_loop(
        self, settings: Any, prefix: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        settings.ACKBOARD_ALERTS_INTERVAL_S = 0.05
        host, port = _closed_port_url().split("/")[2].split(":")
        # No retries of its own: each tick fails at once, and so does the lease's release.
        down = redis.Redis(host=host, port=int(port), retry=Retry(NoBackoff(), 0))
        sender = _CountedSender(
            client=down, interval_s=0.05, lease_key=prefix + "lease",
            fail_first=RuntimeError("a bug in a rule"),
        )  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="dashboard.alerts"):
            stop, thread = _looping(sender)
            # A bug: logged with its traceback, then a 10 s pause that the stop ends.
            wait_until(lambda: sender.ticks >= 1 and caplog.records, timeout=5, what="a log")
            assert caplog.records[0].exc_info is not None
            assert thread.is_alive()
            _stopped(stop, thread)
            sender.fail_first = None
            stop, thread = _looping(sender)

            def retries() -> list[str]:
                return [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]

            wait_until(lambda: len(retries()) >= 3, timeout=10, what="three retries")
            _stopped(stop, thread)
        pauses = [re.findall(r"retrying in ([0-9.]+)s", m) for m in retries()[:3]]
        assert pauses == [["0.1"], ["0.2"], ["0.4"]]


class ReadingsTests:
    def test_the_window_rules_read_the_sampler_history(
        self, world: str, r: redis.Redis, clock: FrozenClock
    ) -> None:
        now = clock.s
        RateSample.objects.bulk_create(
            [RateSample(tier=0, stream=world, group="g", at=now - ago, lag=3, entries_read=5)
             for ago in (200, 100)]
            + [RateSample(tier=0, stream=world, group="", at=now - 800, dead_letters=0)]
            + [RateSample(tier=0, stream="elsewhere", group="", at=now - 800, dead_letters=0)]
        )  # fmt: skip
        r.xadd(stream_keys(world).dlq, {"n": "1"})
        readings = readings_read(client=r, now_ms=clock.ms)
        assert set(readings.history) == {(world, "g"), (world, "")}
        found = {(b.rule.name, b.group, b.value) for b in conditions(readings, now)}
        assert ("AckboardGroupStalled", "g", 3) in found
        assert ("AckboardDeadLettersGrowing", "", 1) in found


class CommandTests:
    def test_send_alerts_once_reports_its_tick(
        self, world: str, settings: Any, prefix: str, receiver: Receiver
    ) -> None:
        settings.ACKBOARD_ALERTS_KEY = prefix + "alerts"
        _hook(receiver.url)
        out = StringIO()
        call_command("send_alerts", "--once", stdout=out)
        assert out.getvalue() == "2 condition(s), 0 firing; 0 alert(s) sent, 0 webhook(s) failed.\n"
        with pytest.raises(CommandError, match="at least 1 second"):
            call_command("send_alerts", "--interval", "0.5")


# --- the admin ---------------------------------------------------------------------------------


def _staff(django_user_model: Any, *codenames: str, name: str = "ada") -> Any:
    user = make_user(django_user_model, name, *codenames)
    user.is_staff = True
    user.save()
    return user


def _changelist() -> str:
    return reverse("admin:dashboard_alertwebhook_changelist")


class AdminTests:
    def test_every_change_writes_an_audit_row_without_the_url(
        self, client: Client, django_user_model: Any
    ) -> None:
        client.force_login(
            _staff(
                django_user_model,
                "add_alertwebhook",
                "change_alertwebhook",
                "delete_alertwebhook",
                "view_alertwebhook",
            )  # fmt: skip
        )
        form = {
            "name": "ops",
            "url": "https://hooks.example/T0K3N",
            "kind": "slack",
            "enabled": "on",
        }
        add = client.post(reverse("admin:dashboard_alertwebhook_add"), {**form, "cooldown_s": 60})
        assert add.status_code == 302
        hook = AlertWebhook.objects.get()
        change_url = reverse("admin:dashboard_alertwebhook_change", args=[hook.pk])
        client.post(change_url, {**form, "cooldown_s": 120})
        bad = client.post(change_url, {**form, "url": "ftp://x", "cooldown_s": -1})
        assert bad.status_code == 200 and b"errornote" in bad.content
        client.post(reverse("admin:dashboard_alertwebhook_delete", args=[hook.pk]), {"post": "yes"})
        rows = list(AuditEvent.objects.order_by("id").values_list("action", "username", "detail"))
        assert rows == [
            ("alert-webhook-add", "ada", "ops (slack)"),
            ("alert-webhook-change", "ada", "ops: changed cooldown_s"),
            ("alert-webhook-delete", "ada", "ops"),
        ]
        assert not AuditEvent.objects.filter(detail__contains="T0K3N").exists()

    def test_send_test_alert_says_whether_it_answered_2xx(
        self, client: Client, django_user_model: Any, receiver: Receiver
    ) -> None:
        client.force_login(_staff(django_user_model, "view_alertwebhook", "test_alertwebhook"))
        hook = _hook(receiver.url)
        press = {"action": "send_test", "_selected_action": [hook.pk]}
        ok = client.post(_changelist(), press, follow=True)
        assert b"Test alert to ops: answered HTTP 200" in ok.content
        assert receiver.bodies == [generic_body(TEST_BREACH, test=True)]
        receiver.status = 500
        failed = client.post(_changelist(), press, follow=True)
        assert b"Test alert to ops: no 2xx answer, HTTP 500" in failed.content
        rows = list(AuditEvent.objects.order_by("id").values_list("action", "result"))
        assert rows == [("alert-webhook-test", "ok"), ("alert-webhook-test", "error")]

    def test_the_button_needs_its_permission_a_login_and_csrf(
        self, client: Client, django_user_model: Any, receiver: Receiver
    ) -> None:
        hook = _hook(receiver.url)
        press = {"action": "send_test", "_selected_action": [hook.pk]}
        assert client.post(_changelist(), press).status_code == 302  # to the login page
        client.force_login(_staff(django_user_model, "view_alertwebhook", "change_alertwebhook"))
        page = client.get(_changelist())
        assert page.status_code == 200 and b"send_test" not in page.content
        client.post(_changelist(), press)
        strict = Client(enforce_csrf_checks=True)
        strict.force_login(_staff(django_user_model, "test_alertwebhook", name="bob"))
        assert strict.post(_changelist(), press).status_code == 403
        assert receiver.bodies == [] and not AuditEvent.objects.exists()
