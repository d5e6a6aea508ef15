"""A real Ackboard web process (the production ASGI server) and the system Chromium.

Used by the browser tests and the benchmarks. The server is started exactly as in
production (``dashboard.runtime.serve.server_argv``: the default server and its flags, unless a
test names another) with its own SQLite file (migrated, one superuser, or one user with
a role), the given Redis, and production settings over plain HTTP; it never runs in demo
mode. Chromium is the system one: Playwright cannot download
browsers here, and a missing one is an error with instructions, never a skip.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from dashboard.runtime.serve import DEFAULT_SERVER, server_argv
from queue_core.failures import failure_from_exception, failures_record
from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "screenshots"
README_SHOTS = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOW_TO_GET_CHROMIUM = (
    f"{CHROMIUM} is missing, so the browser tests cannot run. Install the system Chromium "
    "(Debian/Ubuntu: apt-get install chromium; .ci/run does this in CI). Playwright's own "
    "browser download is not used."
)


class ServerFailed(RuntimeError):
    pass


#: An empty, migrated SQLite file, made once per process (``LiveServer._migrate``).
_MIGRATED_DB = Path(tempfile.gettempdir()) / f"ackboard-migrated-{os.getpid()}" / "db.sqlite3"


@atexit.register
def _forget_migrated_db() -> None:
    shutil.rmtree(_MIGRATED_DB.parent, ignore_errors=True)


@contextlib.contextmanager
def serving(server: LiveServer) -> Iterator[LiveServer]:
    """Start ``server`` and always clean it up, also when the start fails (ServerFailed,
    whose message carries the server's log)."""
    try:
        yield server.start()
    finally:
        server.cleanup()


@dataclass
class LiveServer:
    """The production ASGI server (``dashboard.runtime.serve``) on a free loopback port."""

    redis_url: str
    streams: str = "*"
    tick: float = 1.0
    username: str = "operator"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    #: Fixed for the server's life, so sessions survive a restart of the web process.
    secret_key: str = field(default_factory=lambda: "browser-tests-" + secrets.token_urlsafe(40))
    port: int = field(default_factory=free_port)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ackboard-web-")))
    #: Also run the failure ingestor (``manage.py ingest_failures``) polling this often.
    ingest_poll: float | None = None
    proc: subprocess.Popen[bytes] | None = None
    ingestor: subprocess.Popen[bytes] | None = None
    #: Which ASGI server (``dashboard.runtime.serve.SERVERS``); production's by default.
    server: str = DEFAULT_SERVER
    #: Extra server options, e.g. daphne's ``("--websocket_timeout", "5")``.
    server_args: tuple[str, ...] = ()
    #: None: the user is a superuser. Else a ``grant_role`` role ("operator", "read-only").
    role: str | None = None
    #: More environment for every process (e.g. ``{"ACKBOARD_MAX_STREAMS": "20000"}``).
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "web.log"

    def log_mark(self) -> int:
        """Where the server's log ends now: pass it to ``log_since``."""
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def log_since(self, mark: int) -> str:
        """What the server (access lines included) logged after ``mark``."""
        with self.log_path.open("rb") as log:
            log.seek(mark)
            return log.read().decode("utf-8", "replace")

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "ACKBOARD_")) and k not in ("VALKEY_URL", "REDIS_URL")
        }
        env.update(
            DJANGO_SETTINGS_MODULE="dashboard.settings",
            DJANGO_SECRET_KEY=self.secret_key,
            DJANGO_HTTPS="0",
            DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
            DATABASE_URL=f"sqlite:///{self.workdir / 'db.sqlite3'}",
            ACKBOARD_HOME=str(self.workdir),
            REDIS_URL=self.redis_url,
            ACKBOARD_STREAMS=self.streams,
            ACKBOARD_LIVE_TICK=str(self.tick),
            ACKBOARD_LOG_LEVEL="WARNING",
            DJANGO_SUPERUSER_PASSWORD=self.password,
        )
        env.update(self.extra_env)
        return env

    def _manage(self, *args: str) -> None:
        out = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if out.returncode != 0:
            raise ServerFailed(f"manage.py {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")

    def _migrate(self) -> None:
        """Migrate the server's SQLite file: the first server of this process runs
        ``migrate``, later ones copy what it left (a migrated file is the same for every
        server; a copy costs no Django start). A server given another DATABASE_URL
        always runs ``migrate``."""
        db = self.workdir / "db.sqlite3"
        if "DATABASE_URL" in self.extra_env:
            self._manage("migrate", "--noinput")
            return
        if _MIGRATED_DB.exists():
            shutil.copyfile(_MIGRATED_DB, db)
            return
        self._manage("migrate", "--noinput")
        _MIGRATED_DB.parent.mkdir(parents=True, exist_ok=True)
        partial = _MIGRATED_DB.with_suffix(".partial")
        shutil.copyfile(db, partial)
        partial.replace(_MIGRATED_DB)

    def start(self, timeout: float = 30.0) -> LiveServer:
        self._migrate()
        if self.role is None:
            self._manage(
                "createsuperuser", "--noinput", "--username", self.username,
                "--email", "op@example.com",
            )  # fmt: skip
        else:
            self._manage("grant_role", self.username, self.role, "--create")
            self._manage(
                "shell", "-c",
                "import os; from django.contrib.auth import get_user_model; "
                f"u = get_user_model().objects.get(username={self.username!r}); "
                "u.set_password(os.environ['DJANGO_SUPERUSER_PASSWORD']); u.save()",
            )  # fmt: skip
        if self.ingest_poll is not None:
            self.ingestor = subprocess.Popen(
                [sys.executable, "manage.py", "ingest_failures", "--poll", str(self.ingest_poll)],
                cwd=ROOT,
                env=self.env(),
                stdout=self.log_path.with_suffix(".ingest.log").open("wb"),
                stderr=subprocess.STDOUT,
            )
        return self.start_web(timeout)

    def web_argv(self) -> list[str]:
        """The web process's command line: the production server and its flags."""
        return server_argv(self.server, host="127.0.0.1", port=self.port, extra=self.server_args)

    def start_web(self, timeout: float = 30.0) -> LiveServer:
        """Start (or restart, on the same port) the web process; wait until it answers."""
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.web_argv(), cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise ServerFailed(f"{self.server} exited early:\n{self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(self.url + "/login/", timeout=1) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ServerFailed(f"{self.server} did not answer:\n{self.log_path.read_text()}")
            time.sleep(0.1)  # poll: until it answers or the deadline above

    def worker(self, *args: str) -> subprocess.Popen[bytes]:
        """A ``manage.py queue_worker`` with the server's settings (stop it with terminate)."""
        return subprocess.Popen(
            [sys.executable, "manage.py", "queue_worker", *args],
            cwd=ROOT,
            env=self.env(),
            stdout=self.log_path.with_suffix(".worker.log").open("ab"),
            stderr=subprocess.STDOUT,
        )

    def stop_web(self) -> None:
        """Stop only the web process (its sockets drop; the browser's pages stay)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        for proc in (self.proc, self.ingestor):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.proc = self.ingestor = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


#: Log lines a healthy server never writes: tracebacks, errors inside the ASGI app (daphne's
#: and uvicorn's wording), Django's 500s, 500 access lines, and refused socket handshakes
#: (daphne's WSREJECT, uvicorn's ``"WebSocket /path" 403``).
_PROBLEM = re.compile(
    r"Traceback|Exception inside application|Exception in ASGI application|Timeout reading"
    r"|ASGI callable|Internal Server Error"
    r'|" 500 |"WSREJECT |"WebSocket [^"]*" 403'
)


def log_problems(log: str) -> list[str]:
    """The lines of ``log`` that show something went wrong (see ``_PROBLEM``)."""
    return [line for line in log.splitlines() if _PROBLEM.search(line)]


def socket_connects(log: str, path: str) -> int:
    """How many socket handshakes to ``path`` the server accepted in ``log`` (access lines:
    daphne's ``"WSCONNECT /path"``, uvicorn's ``"WebSocket /path" [accepted]`` with the path
    percent-quoted)."""
    return log.count(f'"WSCONNECT {path}"') + log.count(
        f'"WebSocket {urllib.parse.quote(path)}" [accepted]'
    )


def chromium_launch(playwright: Any) -> Any:
    """The system Chromium, headless. Raises FileNotFoundError with instructions if absent."""
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(HOW_TO_GET_CHROMIUM)
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)


def login(page: Any, server: LiveServer) -> None:
    """Log in through the real form and land on the overview."""
    page.goto(server.url + "/login/")
    page.fill("input[name=username]", server.username)
    page.fill("input[name=password]", server.password)
    page.click("button[type=submit]")
    page.wait_for_url(server.url + "/")


def caught_up(page: Any) -> None:
    """Wait until the page applied its socket's first push. Every socket gets one on
    connect (its surface's last rendering, or a fresh one), which replaces the pushed
    regions: a click in one before it lands may hit an element about to be replaced, or
    miss a target the swap moved. (live.js counts pushes on the root element.)"""
    from playwright.sync_api import expect

    expect(page.locator("html")).to_have_attribute("data-live-pushes", re.compile(r"^[1-9]"))


def row_button(row: Any, name: str, role: str = "button") -> Any:
    """The button (or ``role``: "link") called ``name`` in ``row``'s actions menu
    (``details.row-menu``), with the menu opened: a table row's actions are one menu, its
    buttons hidden until it opens."""
    from playwright.sync_api import expect

    menu = row.locator("details.row-menu")
    if menu.get_attribute("open") is None:
        menu.locator("summary").click()
    expect(menu).to_have_attribute("open", "")
    return menu.get_by_role(role, name=name, exact=True)


def screenshot(page: Any, name: str) -> None:
    """Save ``name``.png as a test artifact (full page).

    With ``ACKBOARD_README_SCREENSHOTS=1`` the run also refreshes the README's copy in
    docs/screenshots; otherwise every test run would dirty the committed images.
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    if os.environ.get("ACKBOARD_README_SCREENSHOTS") == "1":
        # The README copy is the first screen only, which keeps the committed PNGs small.
        README_SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(README_SHOTS / f"{name}.png"), full_page=False)


# --- data ---------------------------------------------------------------------------------

_CUSTOMERS = ("ada@example.com", "grace@example.com", "linus@example.com", "barbara@example.com")
_ERRORS = (
    ("TimeoutError", "payment gateway did not answer within 5 s"),
    ("ConnectionResetError", "[Errno 104] Connection reset by peer (api.payments.internal:443)"),
    ("ValueError", "amount must be positive, got -12.50"),
)


def worker_failure(
    client: redis.Redis,
    *,
    stream: str,
    group: str,
    entry_id: str,
    consumer: str,
    attempt: int,
    error: tuple[str, str],
) -> None:
    """What a worker does when a handler raises: a failure record and a ``failure`` event."""
    error_type, message = error
    exc = type(error_type, (Exception,), {})(message)
    try:
        raise exc
    except Exception as raised:
        record = failure_from_exception(
            raised,
            group=group,
            entry_id=entry_id,
            consumer=consumer,
            attempt=attempt,
            duration_ms=12.5 + attempt,
        )
    failures_record(client=client, stream=stream, records=[record])


def seed(client: redis.Redis, ns: str = "") -> dict[str, str]:
    """Streams that look like a small shop's queues; returns the ids tests use.

    ``{ns}orders``: groups billing (pending on two workers, failures, two dead letters)
    and shipping (caught up); ``{ns}emails``: one pending entry; ``{ns}refunds``: a
    pending entry for the dead-letter test.
    """
    orders, emails, refunds = ns + "orders", ns + "emails", ns + "refunds"
    payments = ns + "payments"
    for name in (orders, emails, refunds, payments):
        keys = stream_keys(name)
        client.delete(name, keys.dlq, keys.failures)
    pipe = client.pipeline(transaction=False)
    for i in range(36):
        fields = {
            "payload": json.dumps(
                {"order_id": 1000 + i, "customer": _CUSTOMERS[i % 4], "amount": 19.5 + i}
            ),
            "source": "checkout",
        }
        pipe.xadd(orders, fields)
    ids = [i.decode() for i in pipe.execute()]
    client.xgroup_create(orders, "billing", id="0")
    client.xgroup_create(orders, "shipping", id="0")
    a = client.xreadgroup("billing", "worker-a", {orders: ">"}, count=20)[0][1]
    b = client.xreadgroup("billing", "worker-b", {orders: ">"}, count=6)[0][1]
    client.xack(orders, "billing", *[e[0] for e in a[:12]])
    client.xreadgroup("shipping", "worker-c", {orders: ">"})
    client.xack(orders, "shipping", *ids)
    failing = [e[0].decode() for e in a[12:16]] + [b[0][0].decode()]
    for n, entry_id in enumerate(failing):
        for attempt in range(1, 2 + n % 3):
            worker_failure(
                client,
                stream=orders,
                group="billing",
                entry_id=entry_id,
                consumer="worker-a" if n < 4 else "worker-b",
                attempt=attempt,
                error=_ERRORS[n % 3],
            )
    for entry_id in (a[16][0].decode(), a[17][0].decode()):
        entry_dead_letter(
            client=client,
            stream=orders,
            group="billing",
            entry_id=entry_id,
            reason="max deliveries (5) reached",
            last_error="ValueError: amount must be positive",
        )
    for i in range(8):
        client.xadd(emails, {"to": _CUSTOMERS[i % 4], "template": "receipt"})
    client.xgroup_create(emails, "sender", id="0")
    sent = client.xreadgroup("sender", "mailer-1", {emails: ">"})[0][1]
    client.xack(emails, "sender", *[e[0] for e in sent[:-1]])
    refund = client.xadd(refunds, {"payload": json.dumps({"order_id": 1007, "amount": 26.5})})
    client.xgroup_create(refunds, "processor", id="0")
    client.xreadgroup("processor", "refunder-1", {refunds: ">"})
    # payments/charger is caught up; its failure log exists (so the server's ingestor finds
    # it at start) for the test that runs a real, failing worker on it.
    paid = [client.xadd(payments, {"payload": json.dumps({"charge": n})}) for n in range(3)]
    client.xgroup_create(payments, "charger", id="0")
    client.xreadgroup("charger", "charger-0", {payments: ">"})
    worker_failure(
        client, stream=payments, group="charger", entry_id=paid[0].decode(),
        consumer="charger-0", attempt=1, error=("RuntimeError", "card declined"),
    )  # fmt: skip
    client.xack(payments, "charger", *paid)
    return {
        "payments": payments,
        "orders": orders,
        "emails": emails,
        "refunds": refunds,
        "failing": failing[0],
        "pending": b[1][0].decode(),
        "refund": refund.decode(),
    }
