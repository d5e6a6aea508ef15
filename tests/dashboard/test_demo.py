"""The one-command demo: its pieces, and the whole thing end to end in a subprocess.

The demo writes fixed ``demo:`` key names, so these tests run it against private
servers started here (dashboard.management.devredis), never against the shared test server.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import redis

from dashboard.management.commands.demo import Command as DemoCommand
from dashboard.management.commands.demo import demo_keys
from dashboard.management.commands.queue_worker import Command as QueueWorkerCommand
from dashboard.management.demo import EMAILS, ORDERS, WORKERS, demo_groups, handlers
from dashboard.management.demo.handlers import flaky, normal, slow
from dashboard.management.demo.producer import (
    Producer,
    demo_groups_create,
    demo_reset,
    email_fields,
    order_fields,
)
from dashboard.management.demo.supervisor import Supervisor
from dashboard.management.devredis import DevRedis, dev_redis_prepare, free_port
from queue_core.jobs import Job, PermanentFailure, UnparseableEntry
from queue_core.keys import stream_keys
from queue_core.parsing import fields_parse
from queue_core.worker import worker_config_from_options
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_server() -> Iterator[DevRedis]:
    """A private server of this module's own, because demo key names are fixed."""
    server = dev_redis_prepare(environ={})
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def demo_client(demo_server: DevRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(demo_server.url)
    demo_reset(client=client)
    try:
        yield client
    finally:
        client.close()


def _job(fields: Mapping[str, str | bytes], *, stream: str = ORDERS, attempt: int = 1) -> Job:
    return Job(
        stream=stream,
        group="g",
        id="1-0",
        fields={k: v for k, v in fields.items() if isinstance(v, str)},
        delivery_count=attempt,
        consumer="c",
    )


class DemoTopologyTests:
    def test_two_groups_share_orders_and_one_consumer_is_doomed(self) -> None:
        assert demo_groups() == {ORDERS: ("billing", "shipping"), EMAILS: ("mailer",)}
        doomed = [w for w in WORKERS if w.doomed]
        assert len(doomed) == 1
        # Someone must be left in the doomed consumer's group to reclaim its entries.
        survivors = [w for w in WORKERS if w.group == doomed[0].group and not w.doomed]
        assert survivors

    def test_worker_command_lines_are_what_queue_worker_parses(self) -> None:
        """The demo writes its workers' flags from WorkerConfig's own declaration."""
        command = QueueWorkerCommand()
        parser = command.create_parser("manage.py", "queue_worker")
        options = {"min_idle_ms": 8000, "max_deliveries": 3, "grace_seconds": 2.5}
        for spec in WORKERS:
            argv = DemoCommand()._worker_argv(spec, options)
            assert argv[1:3] == [str(ROOT / "manage.py"), "queue_worker"]
            parsed = vars(parser.parse_args(argv[3:]))
            config = worker_config_from_options(parsed, url="redis://127.0.0.1:1/0")
            assert (config.stream, config.group, config.consumer) == (
                spec.stream, spec.group, spec.consumer,
            )  # fmt: skip
            assert config.handler is getattr(handlers, spec.handler.rpartition(":")[2])
            assert (config.batch, config.concurrency) == (spec.batch, spec.concurrency)
            assert (config.min_idle_ms, config.reclaim_every_ms) == (8000, 2000)
            assert (config.max_deliveries, config.grace_seconds) == (3, 2.5)
            assert (config.group_start, config.block_ms) == ("0", 1000)


class DemoPayloadTests:
    def test_order_schedule_has_poison_and_malformed_entries(self) -> None:
        import random

        rng = random.Random(1)
        orders = {seq: order_fields(seq, rng) for seq in range(1, 61)}
        assert '"currency": "XXX"' in orders[3]["payload"]
        assert '"currency": "XXX"' in orders[23]["payload"]
        with pytest.raises(PermanentFailure, match="not valid JSON"):
            normal(_job(orders[11]))
        with pytest.raises(ValueError, match="unsupported currency 'XXX'"):
            normal(_job(orders[3], attempt=4))
        normal(_job(orders[1]))  # a good order simply succeeds

    def test_binary_order_is_rejected_by_the_worker_parser(self) -> None:
        import random

        fields = order_fields(29, random.Random(1))
        raw = {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in fields.items()}
        with pytest.raises(UnparseableEntry, match="invoice_pdf"):
            fields_parse(raw)

    def test_invalid_email_address_is_a_permanent_failure(self) -> None:
        import random

        rng = random.Random(1)
        bounce, good = email_fields(2, rng), email_fields(3, rng)
        assert "api_token" in bounce  # shows the dashboard's redaction
        with pytest.raises(PermanentFailure, match="550 mailbox unavailable"):
            normal(_job(bounce, stream=EMAILS))
        normal(_job(good, stream=EMAILS))


class DemoHandlerTests:
    good = {"payload": '{"order": 1, "currency": "EUR"}'}

    def test_flaky_fails_transiently_at_its_rate(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("ACKBOARD_DEMO_FLAKY_RATE", "1")
        with pytest.raises(TimeoutError, match="attempt 2"):
            flaky(_job(self.good, attempt=2))
        monkeypatch.setenv("ACKBOARD_DEMO_FLAKY_RATE", "0")
        flaky(_job(self.good))

    def test_slow_is_async_and_honours_its_time_limit(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("ACKBOARD_DEMO_SLOW_MS", "40")
        started = time.monotonic()
        asyncio.run(slow(_job(self.good)))
        assert 0.009 <= time.monotonic() - started < 1.0
        with pytest.raises(ValueError, match="unsupported currency"):
            asyncio.run(slow(_job({"payload": '{"currency": "XXX"}'})))


class DemoProducerTests:
    def test_groups_are_created_at_the_start_and_kept(self, demo_client: redis.Redis) -> None:
        demo_client.xadd(ORDERS, {"payload": "{}"})
        demo_groups_create(client=demo_client)
        demo_groups_create(client=demo_client)  # BUSYGROUP is fine
        groups = {g["name"]: g for g in demo_client.xinfo_groups(ORDERS)}
        assert set(groups) == {b"billing", b"shipping"}
        # Created at 0, so entries added before the workers start are still delivered.
        assert groups[b"billing"]["last-delivered-id"] == b"0-0"
        assert demo_client.xinfo_groups(EMAILS)[0]["name"] == b"mailer"

    def test_add_appends_orders_and_emails(self, demo_client: redis.Redis) -> None:
        producer = Producer(client=demo_client, rate=0, seed=7)
        producer.add(orders=5, emails=3)
        producer.add(orders=1, emails=0)
        assert demo_client.xlen(ORDERS) == 6
        assert demo_client.xlen(EMAILS) == 3
        last = demo_client.xrevrange(ORDERS, count=1)[0][1]
        assert b'"order": 6' in last[b"payload"]

    def test_thread_produces_at_its_rate_and_stops(self, demo_client: redis.Redis) -> None:
        producer = Producer(client=demo_client, rate=50)
        producer.start()
        time.sleep(0.5)  # the producer runs this long: its count is the figure
        producer.stop()
        produced = demo_client.xlen(ORDERS)
        assert 5 <= produced <= 40
        time.sleep(0.1)  # a window in which a stopped producer must add nothing
        assert demo_client.xlen(ORDERS) == produced  # stopped means stopped

    def test_reset_deletes_demo_keys_only(self, demo_client: redis.Redis) -> None:
        demo_client.xadd(ORDERS, {"a": "1"})
        demo_client.xadd(stream_keys(ORDERS).dlq, {"a": "1"})
        demo_client.set("not-demo:keep", "1")
        try:
            assert demo_reset(client=demo_client) == 2
            assert demo_client.exists(ORDERS, stream_keys(ORDERS).dlq) == 0
            assert demo_client.get("not-demo:keep") == b"1"
        finally:
            demo_client.delete("not-demo:keep")


class DemoAdminTests:
    @pytest.mark.django_db
    def test_password_is_generated_and_reset_on_rerun(self, django_user_model: Any) -> None:
        from django.contrib.auth import authenticate

        from dashboard.management.commands.demo import admin_password_reset

        first, created = admin_password_reset()
        assert created
        user = django_user_model.objects.get(username="admin")
        assert user.is_superuser and user.is_staff
        second, created_again = admin_password_reset()
        assert not created_again
        assert first != second and len(second) >= 16
        assert authenticate(username="admin", password=first) is None
        assert authenticate(username="admin", password=second) is not None


def _alive(pid: int) -> bool:
    """Running (not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid``, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _wait_gone(pids: set[int], timeout: float) -> set[int]:
    """The processes of ``pids`` still alive once all are gone or ``timeout`` passed."""

    def left() -> set[int]:
        return {p for p in pids if _alive(p)}

    with contextlib.suppress(AssertionError):
        wait_until(lambda: not left(), timeout, "the processes to exit", interval=0.05)
    return left()


class SupervisorTests:
    def test_stop_terminates_and_reaps_every_child(self, tmp_path: Path) -> None:
        sup = Supervisor(env=dict(os.environ), log_dir=tmp_path, cwd=tmp_path)
        a = sup.start("a", ["sleep", "60"])
        # A child that ignores SIGTERM is SIGKILLed after the timeout, with its own child.
        b = sup.start("b", ["sh", "-c", "trap '' TERM; sleep 60 & wait"])
        # Its trap is set before it starts its child.
        grandchildren = wait_until(lambda: _descendants(b.pid), 5, "b's child", interval=0.05)
        sup.stop(timeout=0.5)
        assert a.proc.returncode is not None and b.proc.returncode is not None
        assert not _wait_gone(grandchildren | {a.pid, b.pid}, 3)

    def test_a_killed_child_is_not_reported_as_crashed(self, tmp_path: Path) -> None:
        sup = Supervisor(env=dict(os.environ), log_dir=tmp_path, cwd=tmp_path)
        doomed = sup.start("doomed", ["sleep", "60"])
        crasher = sup.start("crasher", ["sh", "-c", "echo boom; exit 3"])
        crasher.proc.wait()
        sup.kill(doomed)
        assert doomed.proc.returncode == -signal.SIGKILL
        assert sup.crashed() == [crasher]
        assert "boom" in crasher.log_tail()
        sup.stop()

    def test_children_die_with_a_killed_parent(self, tmp_path: Path) -> None:
        script = textwrap.dedent(
            f"""
            import os, sys, time
            sys.path.insert(0, {str(ROOT)!r})
            from pathlib import Path
            from dashboard.management.demo.supervisor import Supervisor
            sup = Supervisor(env=dict(os.environ), log_dir=Path({str(tmp_path)!r}), cwd=Path("."))
            print(sup.start("sleeper", ["sleep", "60"]).pid, flush=True)
            time.sleep(60)  # the parent idles until the test SIGKILLs it
            """
        )
        parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.kill()  # SIGKILL: no cleanup code runs in the parent
        parent.wait()
        assert not _wait_gone({child}, 5), "the child outlived its SIGKILLed parent"


class _Lines:
    """Reads a process's output on a thread, so the test can wait with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert proc.stdout is not None
        stdout = proc.stdout

        def pump() -> None:
            for line in stdout:
                self.lines.put(line)

        threading.Thread(target=pump, daemon=True).start()

    def until(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            for line in self.seen:
                match = re.search(pattern, line)
                if match:
                    return match
            try:
                self.seen.append(self.lines.get(timeout=max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                raise AssertionError(
                    f"no line matching {pattern!r} in {timeout} s; output:\n" + "".join(self.seen)
                ) from None


def _demo_env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "ACKBOARD_"))
        and k not in ("REDIS_URL", "VALKEY_URL", "REDIS_TEST_URL")
    }
    env["ACKBOARD_HOME"] = str(home)
    return env


def _login(base: str, username: str, password: str) -> urllib.request.OpenerDirector:
    """Log in over HTTP like a browser: GET the form, POST it with the CSRF token."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(base + "login/", timeout=10) as response:
        html = response.read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert token, html[:500]
    form = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token.group(1)}
    ).encode()
    request = urllib.request.Request(base + "login/", data=form, headers={"Referer": base})
    with opener.open(request, timeout=10) as response:
        # A failed login re-renders the form; a good one redirects away from it.
        assert "/login/" not in response.url, "login refused"
    assert any(c.name == "sessionid" for c in jar)
    return opener


class DemoCommandTests:
    def test_refuses_a_port_in_use(self, tmp_path: Path) -> None:
        import socket

        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            out = subprocess.run(
                [sys.executable, "manage.py", "demo", "--port", str(port)],
                cwd=ROOT,
                env=_demo_env(tmp_path),
                capture_output=True,
                text=True,
                timeout=60,
            )
        assert out.returncode != 0
        assert f"127.0.0.1:{port} is in use" in out.stderr

    def test_unreachable_redis_url_is_a_clear_error(self, tmp_path: Path) -> None:
        env = _demo_env(tmp_path) | {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
        out = subprocess.run(
            [sys.executable, "manage.py", "demo", "--port", str(free_port())],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2
        assert "CommandError: cannot reach redis://127.0.0.1:" in out.stderr
        assert "Traceback" not in out.stderr

    @pytest.mark.timeout(60)
    def test_a_server_from_redis_url_is_used_and_left_running(
        self, tmp_path: Path, demo_server: DevRedis, demo_client: redis.Redis
    ) -> None:
        demo_client.set("someone-else:key", "kept")
        env = _demo_env(tmp_path) | {"REDIS_URL": demo_server.url}
        proc = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "demo",
                "--port",
                str(free_port()),
                "--kill-after",
                "0",
                "--backlog",
                "10",
                "--slow-ms",
                "200",
                "--grace-seconds",
                "1",
                "--keep",
            ],  # fmt: skip
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out = _Lines(proc)
        try:
            out.until(r"from VALKEY_URL/REDIS_URL", 30)
            out.until(r"^Dashboard\s+http://", 40)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
        assert proc.returncode == 0, "".join(out.seen)
        assert "private redis-server" not in "".join(out.seen)
        assert "Cleanup" not in "".join(out.seen)  # --keep
        # Not flushed, not stopped: the demo only added its own demo: keys.
        assert demo_client.get("someone-else:key") == b"kept"
        assert demo_client.xlen(ORDERS) >= 10
        demo_client.delete("someone-else:key")

    @pytest.mark.timeout(90)
    def test_on_someone_elses_redis_it_deletes_only_the_keys_it_created(
        self, tmp_path: Path, demo_server: DevRedis, demo_client: redis.Redis
    ) -> None:
        # Left by someone else: another app's key, and a demo stream from a --keep run.
        demo_client.set("someone-else:key", "kept")
        demo_client.xadd(EMAILS, {"payload": "{}", "left": "by an earlier run"})
        made = [k for k in demo_keys() if k != EMAILS]
        assert not demo_client.exists(*made)
        env = _demo_env(tmp_path) | {"REDIS_URL": demo_server.url}
        proc = subprocess.Popen(
            [
                sys.executable, "manage.py", "demo", "--port", str(free_port()),
                "--kill-after", "0", "--backlog", "10", "--rate", "20",
                "--max-deliveries", "1", "--grace-seconds", "1",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        out = _Lines(proc)
        try:
            base = out.until(r"^Dashboard\s+(http://\S+)", 40).group(1)
            password = out.until(r"^Password\s+(\S+)", 1).group(1)
            _login(base, "admin", password)  # a session, kept in the database only
            wait_until(lambda: demo_client.exists(*made) == len(made), 20,
                       "the demo to write every stream and companion", interval=0.1)  # fmt: skip
            assert not demo_client.keys("*session*")
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
        assert proc.returncode == 0, "".join(out.seen)
        out.until(rf"^Cleanup\s+deleted the {len(made)} demo keys it created", 2)
        assert demo_client.exists(*made) == 0
        assert not demo_client.keys("*session*")
        assert not demo_client.keys("ackboard:channels:*")
        # What it did not create is still there.
        assert demo_client.get("someone-else:key") == b"kept"
        assert demo_client.xlen(EMAILS) >= 1
        demo_client.delete("someone-else:key")

    @pytest.mark.timeout(90)
    def test_end_to_end_then_ctrl_c_leaves_nothing_behind(self, tmp_path: Path) -> None:
        port = free_port()
        proc = subprocess.Popen(
            [
                sys.executable, "manage.py", "demo",
                "--port", str(port),
                "--rate", "20",
                "--backlog", "30",
                "--min-idle-ms", "800",
                "--max-deliveries", "2",
                "--kill-after", "1",
                "--slow-ms", "400",
                "--grace-seconds", "1",
            ],
            cwd=ROOT,
            env=_demo_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        out = _Lines(proc)
        try:
            redis_url = out.until(r"^\s+(redis://127\.0\.0\.1:\d+/0)", 30).group(1)
            base = out.until(r"^Dashboard\s+(http://\S+)", 40).group(1)
            username = out.until(r"^Username\s+(\S+)", 1).group(1)
            password = out.until(r"^Password\s+(\S+)", 1).group(1)
            assert base == f"http://127.0.0.1:{port}/"
            assert (tmp_path / "secret_key").exists() and (tmp_path / "db.sqlite3").exists()

            opener = _login(base, username, password)
            with opener.open(base + "admin/", timeout=10) as response:
                assert response.status == 200 and "/login/" not in response.url

            client = redis.Redis.from_url(redis_url)
            try:
                groups = {g["name"]: g for g in client.xinfo_groups(ORDERS)}
                assert set(groups) == {b"billing", b"shipping"}
                wait_until(lambda: any(g["pending"] for g in client.xinfo_groups(ORDERS)), 10,
                           "pending entries in demo:orders", interval=0.1)  # fmt: skip
                # The poison order (#3) exhausts 2 deliveries; email #2 bounces at once.
                wait_until(lambda: client.xlen(stream_keys(ORDERS).dlq), 20, "an order dead letter")
                wait_until(lambda: client.xlen(stream_keys(EMAILS).dlq), 5, "an email dead letter")
                assert client.xlen(stream_keys(ORDERS).failures) > 0

                # One shipping consumer is SIGKILLed mid-batch; the others reclaim its entries.
                out.until(r"^Chaos\s+SIGKILLed consumer shipping-3 .* with [1-9]\d* entries", 20)

                def doomed_pending() -> int:
                    for c in client.xinfo_consumers(ORDERS, "shipping"):
                        if c["name"] == b"shipping-3":
                            return int(c["pending"])
                    return 0

                wait_until(lambda: doomed_pending() == 0, 10, "the stale entries reclaimed")
            finally:
                client.close()

            children = _descendants(proc.pid)
            assert len(children) >= len(WORKERS) + 1  # workers (one killed) + web + valkey
        except BaseException:
            proc.kill()
            raise
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(timeout=30) == 0, "".join(out.seen)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert not _wait_gone(children, 5), "processes left behind after Ctrl-C"
        out.until(r"^Stopping\s+private valkey-server$", 2)  # the embedded server, named
        out.until(r"^Stopped\.", 2)
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(redis_url, socket_connect_timeout=1).ping()
