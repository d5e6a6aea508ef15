"""The web process as production runs it: ``dashboard.runtime.serve`` and ``manage.py serve``.

The flags are checked as data; then each server really runs the application from
``manage.py serve`` on a free port over the private test Redis: ``/healthz`` answers, a
socket without a session is refused by the consumer (so Channels' WebSocket path works
on that server), and SIGTERM stops it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets

from dashboard.runtime.serve import APPLICATION, DEFAULT_SERVER, SERVERS, server_argv
from tests.redis_server import free_port
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
KEY = "a-production-key-" + "s3rv3" * 12


class ServerArgvTests:
    @pytest.mark.parametrize("server", SERVERS)
    def test_every_server_runs_the_application_on_the_address(self, server: str) -> None:
        argv = server_argv(server, host="0.0.0.0", port=8123, python="/py")
        assert argv[:3] == ["/py", "-m", server]
        assert argv[-1] == APPLICATION
        assert "0.0.0.0" in argv and "8123" in argv

    @pytest.mark.parametrize("server", ["uvicorn", "granian"])
    def test_one_worker_per_process(self, server: str) -> None:
        argv = server_argv(server)
        assert argv[argv.index("--workers") + 1] == "1"

    def test_uvicorn_has_the_fast_loop_and_no_proxy_header_rewriting(self) -> None:
        argv = server_argv("uvicorn")
        assert argv[argv.index("--loop") + 1] == "uvloop"
        assert argv[argv.index("--http") + 1] == "httptools"
        assert argv[argv.index("--ws") + 1] == "websockets-sansio"
        assert argv[argv.index("--ws-per-message-deflate") + 1] == "false"
        assert "--no-proxy-headers" in argv
        assert argv[argv.index("--ws-ping-interval") + 1] == "20"
        assert argv[argv.index("--ws-ping-timeout") + 1] == "30"

    def test_extra_flags_come_before_the_application(self) -> None:
        argv = server_argv("daphne", extra=("--websocket_timeout", "3"))
        assert argv[-3:] == ["--websocket_timeout", "3", APPLICATION]

    def test_an_unknown_server_is_refused(self) -> None:
        with pytest.raises(ValueError, match="unknown server 'gunicorn'"):
            server_argv("gunicorn")

    def test_the_default_is_one_of_them(self) -> None:
        assert DEFAULT_SERVER in SERVERS


def _env(home: Path, redis_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "ACKBOARD_")) and k not in ("REDIS_URL", "VALKEY_URL")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="dashboard.settings",
        DJANGO_SECRET_KEY=KEY,
        DJANGO_HTTPS="0",
        ACKBOARD_HOME=str(home),
        DATABASE_URL=f"sqlite:///{home / 'db.sqlite3'}",
        REDIS_URL=redis_url,
    )
    return env


@pytest.fixture
def served(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str) -> Iterator[int]:
    """``manage.py serve --server <param>`` on a free port; yields the port."""
    env = _env(tmp_path, redis_url)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT, env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    port = free_port()
    log = (tmp_path / "web.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--server", request.param, "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    request.node.served_proc = proc
    try:

        def answering() -> bool:
            assert proc.poll() is None, (tmp_path / "web.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    return True
            except OSError:
                return False

        wait_until(answering, timeout=30, interval=0.1, what="the server to answer /healthz")
        yield port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _anonymous_close_code(port: int) -> int | None:
    origin = f"http://127.0.0.1:{port}"
    async with websockets.connect(
        f"ws://127.0.0.1:{port}/ws/streams/orders/", additional_headers={"Origin": origin}
    ) as socket:
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(socket.recv(), timeout=10)
        return socket.close_code


class ServeCommandTests:
    @pytest.mark.parametrize("served", SERVERS, indirect=True)
    def test_serves_pages_and_sockets_and_stops_on_sigterm(
        self, served: int, request: pytest.FixtureRequest
    ) -> None:
        proc: subprocess.Popen[bytes] = request.node.served_proc
        server = request.node.callspec.params["served"]
        with urllib.request.urlopen(f"http://127.0.0.1:{served}/healthz", timeout=5) as response:
            assert response.status == 200
            assert response.read().startswith(b"ok")
        # The consumer runs and refuses a socket without a session (4401): Channels works.
        assert asyncio.run(_anonymous_close_code(served)) == 4401
        # The command became the server (exec): a supervisor's signal reaches it.
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[1:3] == [b"-m", server.encode()]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) in (0, -signal.SIGTERM)

    def test_print_shows_the_command_line(self, tmp_path: Path, redis_url: str) -> None:
        out = subprocess.run(
            [sys.executable, "manage.py", "serve", "--print", "-b", "0.0.0.0", "-p", "8124"],
            cwd=ROOT, env=_env(tmp_path, redis_url), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == server_argv(DEFAULT_SERVER, host="0.0.0.0", port=8124)
