"""The README's "Use it on your own Redis" path, run as written on a queue Ackboard didn't write.

Each shell block after an ``<!-- existing-deployment: NAME -->`` marker in README.md runs
line by line in bash, in a clean environment: a temp ``ACKBOARD_HOME`` (so SQLite),
the session's private Redis as ``REDIS_URL``, a secret key, nothing of DEBUG or the demo.
The lines run unchanged except where a test cannot do what a person does:

- ``uv run X`` runs X from the project's virtualenv, as uv would (a ``uv`` script first
  on PATH execs X, with the venv's bin next), so the test never syncs or locks the
  shared environment, and a stop signal reaches the command itself;
- ``-p 8000`` becomes a free port;
- ``createsuperuser`` gets ``--noinput`` and ``DJANGO_SUPERUSER_PASSWORD`` (the README
  says so), and ``changepassword`` reads the password twice from stdin.

The queue is the workshop's shape: stream ``reviews:queue``, group ``reviewers``, flat
string fields, written here with plain redis-py, never by Ackboard.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path

import pytest
import redis

from queue_core.failures import failure_from_exception, failures_record
from tests.redis_server import free_port
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent
MARKER = re.compile(r"<!-- existing-deployment: ([a-z-]+)\b.*?-->")
#: Stands in for uv: ``uv run X`` becomes X itself (exec), found in the venv on PATH.
UV_SHIM = '#!/bin/sh\nif [ "$1" = run ]; then shift; fi\nexec "$@"\n'

# The README's commands, not the server, are under test here: one engine is enough.
pytestmark = [pytest.mark.timeout(180), pytest.mark.one_engine]


def readme_blocks(text: str) -> dict[str, list[str]]:
    """The command lines of the first ``sh`` block after each marker, by marker name."""
    blocks: dict[str, list[str]] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = MARKER.search(line)
        if match is None:
            continue
        start = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```sh"))
        end = next(j for j in range(start + 1, len(lines)) if lines[j].startswith("```"))
        blocks[match.group(1)] = [c for c in lines[start + 1 : end] if c.strip()]
    return blocks


def _words(line: str) -> list[str]:
    return shlex.split(line, comments=True)


def _has(line: str, *words: str) -> bool:
    found = _words(line)
    return all(w in found for w in words)


@dataclass
class Deployment:
    """The README's commands with one environment: a temp home, the given Redis."""

    redis_url: str
    streams: str
    home: Path
    admin_password: str = field(default_factory=lambda: "adm-" + secrets.token_urlsafe(12))
    port: int = field(default_factory=free_port)
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "ACKBOARD_"))
            and k not in ("REDIS_URL", "VALKEY_URL", "REDIS_TEST_URL", "DATABASE_URL")
        }
        env.update(
            PATH=os.pathsep.join((str(self._shim_dir()), str(VENV_BIN), env.get("PATH", ""))),
            REDIS_URL=self.redis_url,
            ACKBOARD_STREAMS=self.streams,
            ACKBOARD_HOME=str(self.home),
            DJANGO_SECRET_KEY="deployment-test-" + secrets.token_urlsafe(40),
            DJANGO_SUPERUSER_PASSWORD=self.admin_password,
        )
        return env

    def _script(self, line: str) -> str:
        if _has(line, "createsuperuser") and "--noinput" not in _words(line):
            line = line.split("#", 1)[0].rstrip() + " --noinput"
        line = re.sub(r"(-p\s+)8000\b", rf"\g<1>{self.port}", line)
        return line

    def _shim_dir(self) -> Path:
        shim = self.home / "shim" / "uv"
        if not shim.exists():
            shim.parent.mkdir(parents=True)
            shim.write_text(UV_SHIM)
            shim.chmod(0o755)
        return shim.parent

    def run(self, line: str, *, stdin: str = "") -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            ["bash", "-c", self._script(line)],
            cwd=ROOT,
            env=self.env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,  # no controlling terminal: getpass reads stdin
        )
        assert out.returncode == 0, f"{line}\n{out.stdout}\n{out.stderr}"
        assert "Traceback" not in out.stderr, out.stderr
        return out

    def start(self, line: str, log_name: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            ["bash", "-c", self._script(line)],
            cwd=ROOT,
            env=self.env(),
            stdout=(self.home / log_name).open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stopping it stops bash and the server
        )
        self.background.append(proc)
        return proc

    def log(self, log_name: str) -> str:
        return (self.home / log_name).read_text(errors="replace")

    def wait_serving(
        self, proc: subprocess.Popen[bytes], log_name: str, headers: dict[str, str] | None = None
    ) -> None:
        """Until ``/healthz`` answers 200 over plain HTTP, as a load balancer's probe asks."""
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"the server exited:\n{self.log(log_name)}"
            try:
                if _get(self.base + "healthz", headers)[0] == 200:
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"no answer in 60 s:\n{self.log(log_name)}"
            time.sleep(0.2)  # poll: until it answers or the deadline above

    def stop(self, proc: subprocess.Popen[bytes]) -> int:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def stop_all(self) -> None:
        for proc in self.background:
            self.stop(proc)


@pytest.fixture
def deployment(redis_url: str, prefix: str, tmp_path: Path) -> Iterator[Deployment]:
    deployment = Deployment(redis_url=redis_url, streams=f"{prefix}*", home=tmp_path)
    try:
        yield deployment
    finally:
        deployment.stop_all()


@pytest.fixture
def blocks() -> dict[str, list[str]]:
    found = readme_blocks(README.read_text())
    assert {"setup", "serve-proxy", "serve-loopback", "ingest", "roles"} <= set(found), found
    return found


def _server_errors(log: str) -> list[str]:
    """Lines of the web server's log that show a server error (not a refusal): Django's,
    daphne's and uvicorn's ways of saying so, or a 5xx access line."""
    problem = re.compile(
        r"Internal Server Error|Exception inside application|Exception in ASGI application"
        r'|" 5\d\d '
    )
    return [line for line in log.splitlines() if problem.search(line)]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Message]:
    """Status and headers (looked up case-insensitively, as servers differ in case) of
    one GET, redirects not followed."""
    opener = urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers


class Browser:
    """A cookie-keeping HTTP client that logs in and posts like a browser (CSRF included)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> tuple[int, str, str]:
        try:
            with self.opener.open(self.base + path.lstrip("/"), timeout=10) as response:
                return response.status, response.url, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.url, exc.read().decode(errors="replace")

    def _csrf(self) -> str:
        return next(str(c.value) for c in self.jar if c.name == "csrftoken")

    def post(self, path: str, data: dict[str, str]) -> int:
        form = urllib.parse.urlencode({**data, "csrfmiddlewaretoken": self._csrf()}).encode()
        request = urllib.request.Request(
            self.base + path.lstrip("/"), data=form, headers={"Referer": self.base}
        )
        try:
            with self.opener.open(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    def login(self, username: str, password: str) -> bool:
        status, _, html = self.get("login/")
        assert status == 200, html[:500]
        self.post("login/", {"username": username, "password": password})
        return any(c.name == "sessionid" for c in self.jar)


def _workshop_queue(r: redis.Redis, prefix: str) -> tuple[str, str]:
    """The workshop's queue as its own producer and worker leave it: one review pending."""
    stream, group = f"{prefix}reviews:queue", "reviewers"
    r.xgroup_create(stream, group, id="0", mkstream=True)
    r.xadd(stream, {"reviewId": "r-1", "prUrl": "https://example.com/pr/1"})
    read: list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]
    read = r.xreadgroup(group, "reviewer-1", {stream: ">"}, count=1)  # type: ignore[assignment]  # redis-py types replies loosely
    entry_id = read[0][1][0][0]
    return stream, entry_id.decode()


class ExistingDeploymentTests:
    def test_the_readme_path_runs_as_written(
        self, deployment: Deployment, blocks: dict[str, list[str]], r: redis.Redis, prefix: str
    ) -> None:
        stream, entry_id = _workshop_queue(r, prefix)

        # 2. The database and the first admin.
        for line in blocks["setup"]:
            deployment.run(line)

        # 3. The web server, plain HTTP on loopback.
        [serve] = blocks["serve-loopback"]
        web = deployment.start(serve, "web.log")
        deployment.wait_serving(web, "web.log")
        assert _get(deployment.base + "healthz")[0] == 200
        assert _get(deployment.base + "login/")[0] == 200  # not a 301 to https

        admin = Browser(deployment.base)
        assert admin.login("admin", deployment.admin_password), "admin login refused"
        status, url, html = admin.get("")
        assert status == 200 and "/login/" not in url
        assert stream in html

        # 4. The failure ingestor: a record the foreign worker's failure leaves reaches SQL.
        [ingest] = blocks["ingest"]
        ingestor = deployment.start(ingest, "ingest.log")
        try:
            raise TimeoutError("review service timed out")
        except TimeoutError as exc:
            record = failure_from_exception(
                exc, group="reviewers", entry_id=entry_id, consumer="reviewer-1",
                attempt=1, duration_ms=30_000.0,
            )  # fmt: skip
        failures_record(client=r, stream=stream, records=[record])

        def on_the_failures_page() -> bool:
            assert ingestor.poll() is None, deployment.log("ingest.log")
            return "review service timed out" in admin.get(f"failures/?stream={stream}")[2]

        wait_until(on_the_failures_page, timeout=30, interval=0.3,
                   what="the failure to reach the Failures page")  # fmt: skip

        # 5. Roles: each grant takes effect on the next request of a logged-in user.
        retry = f"streams/{stream}/groups/reviewers/entries/{entry_id}/retry/"
        alice_password = "alice-" + secrets.token_urlsafe(12)
        alice = Browser(deployment.base)
        for line in blocks["roles"]:
            if _has(line, "changepassword"):
                deployment.run(line, stdin=f"{alice_password}\n{alice_password}\n")
                assert alice.login("alice", alice_password), "alice's login refused"
                continue
            deployment.run(line)
            if not any(c.name == "sessionid" for c in alice.jar):
                continue  # she has no password yet
            words = _words(line)
            r.xclaim(stream, "reviewers", "reviewer-1", 0, [entry_id])  # idle 0 again
            view = alice.get("")[0]
            act = alice.post(retry, {"place": "entry"})  # the redirect after it is followed
            [row] = r.xpending_range(stream, "reviewers", min=entry_id, max=entry_id, count=1)
            retried = row["time_since_delivered"] >= 10_000  # Retry made it due
            if "--revoke" in words:
                assert (view, act, retried) == (403, 403, False), line
            elif "operator" in words:
                assert (view, act, retried) == (200, 200, True), line
            else:
                assert (view, act, retried) == (200, 403, False), line
        assert {"read-only", "operator", "--revoke"} <= {
            w for line in blocks["roles"] for w in _words(line)
        }

        # Stopping: both long-running processes exit cleanly on SIGTERM.
        assert deployment.stop(ingestor) == 0, deployment.log("ingest.log")
        deployment.stop(web)
        assert "Traceback" not in deployment.log("ingest.log")
        # (A 403 is logged by Django with its PermissionDenied traceback: not a problem.)
        assert not _server_errors(deployment.log("web.log"))

    def test_behind_a_proxy_https_is_enforced_but_healthz_answers_plain_http(
        self, deployment: Deployment, blocks: dict[str, list[str]]
    ) -> None:
        for line in blocks["setup"]:
            deployment.run(line)
        [serve] = blocks["serve-proxy"]
        host = re.search(r"DJANGO_ALLOWED_HOSTS=(\S+)", serve)
        assert host, serve
        headers = {"Host": host.group(1)}
        web = deployment.start(serve, "web.log")
        # /healthz answers plain HTTP with the redirect on, so this wait passes.
        deployment.wait_serving(web, "web.log", headers)

        status, sent = _get(deployment.base + "login/", headers)
        assert status == 301 and sent["Location"] == f"https://{host.group(1)}/login/"
        status, sent = _get(deployment.base + "healthz", headers)
        assert status == 200 and "Strict-Transport-Security" not in sent
        # What the proxy forwards after ending TLS: served, with HSTS and secure cookies.
        status, sent = _get(deployment.base + "login/", headers | {"X-Forwarded-Proto": "https"})
        assert status == 200
        assert "Strict-Transport-Security" in sent
        assert "secure" in sent.get("Set-Cookie", "").lower()
        deployment.stop(web)
        assert "Traceback" not in deployment.log("web.log")
