"""Live fan-out at 1, 100 and 1,000 sockets on one web process: is every update delivered,
how fast, and what does it cost the server and Redis?

Starts a private redis-server and the production web process (``server_command``; by
default ``dashboard.runtime.serve``'s command line of the production server), logs in over
HTTP, and opens N WebSockets on one group page's surface (a lean RFC 6455 client on
epoll, in a child process, so the clients' own work neither delays the writer's clock
nor passes for the server's latency). Then it writes M times to the watched stream at a
steady rate (one XADD each; the group page's "Stream length"
is the marker, so every push says which write it shows) and records, for every socket,
every update it received.

Per N it reports:

- dropped: (socket, write) pairs whose state (or a later one) never reached the socket;
- skipped: (socket, write) pairs whose exact state was never pushed to the socket (a
  later state came instead: the server coalesced). Zero at the default rate;
- p50 / p95 / max latency from just before the XADD to the first receipt of a state that
  includes it, over every (socket, write) pair;
- server CPU per update (utime + stime of the server's process tree from /proc, over the
  writing window, divided by M): everything the process did, the tick's polls included;
- Redis commands per second over the window (INFO commandstats), the writer's own XADDs
  not counted;
- idle CPU: the server's CPU with every socket open and nothing written (session
  rechecks, the tick's polls), and the machine's load average (latency on a shared
  machine depends on it).

    uv run python -m benchmarks.fanout_scale [--sockets 1,100,1000] [--writes 30] [--rate 2]
        [--server daphne|uvicorn|granian|"<a command line with {python} and {port}>"]

``fanout_scale()`` is the same run as a function (``benchmarks.serving`` includes it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.cookiejar
import multiprocessing
import os
import re
import resource
import selectors
import shlex
import socket
import statistics
import struct
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import redis

from dashboard.runtime.serve import DEFAULT_SERVER, SERVERS, server_argv
from tests.browser.server import LiveServer, seed
from tests.redis_server import RedisServer


def server_command_of(server: str = DEFAULT_SERVER) -> str:
    """The production command line of ``server`` (``dashboard.runtime.serve``), with ``{python}``
    and ``{port}`` left to fill in."""
    return shlex.join(server_argv(server, host="127.0.0.1", port="{port}", python="{python}"))


#: The group page's marker: its "Stream length" fact, in the group-summary partial.
MARKER = re.compile(rb'Stream length</div><div class="value">(\d+)<')
#: Sockets opened at once (a connect storm is not what is measured).
CONNECT_BATCH = 50


@dataclass(frozen=True)
class FanoutResult:
    """One row of the table: N sockets, M writes."""

    sockets: int
    writes: int
    connected: int
    dropped: int
    skipped: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    cpu_ms_per_update: float
    redis_commands_per_s: float
    idle_cpu_percent: float
    #: Mean size of a push that carried a write (one socket's view).
    kb_per_update: float = 0.0
    #: The machine's 1-minute load average at the end of the phase: on a shared machine the
    #: latencies depend on it (the server gets a share of the cores).
    load: float = 0.0


class _Server(LiveServer):
    """``LiveServer`` with the web command as a parameter (daphne, uvicorn, granian…)."""

    command: str = ""

    def web_argv(self) -> list[str]:
        return [a.format(python=sys.executable, port=self.port) for a in shlex.split(self.command)]


# --- measuring the server ----------------------------------------------------------------


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a server with worker processes counts them all)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo.extend(int(c) for c in (task / "children").read_text().split())
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid``'s process tree, in seconds (from /proc/<pid>/stat)."""
    total = 0
    for p in _tree(pid):
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)
    return total / os.sysconf("SC_CLK_TCK")


def redis_calls(client: redis.Redis) -> int:
    """Commands Redis has run, INFO itself left out."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def login_cookie(server: LiveServer) -> str:
    """Log in through the real form; the Cookie header a socket of that session sends."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(server.url + "/login/", timeout=10) as response:
        page = response.read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, "no CSRF token on the login page"
    body = urllib.parse.urlencode(
        {
            "csrfmiddlewaretoken": token.group(1),
            "username": server.username,
            "password": server.password,
        }
    ).encode()
    request = urllib.request.Request(
        server.url + "/login/", data=body, headers={"Origin": server.url, "Referer": server.url}
    )
    with opener.open(request, timeout=10):
        pass
    names = {c.name for c in jar}
    assert "sessionid" in names, f"login failed (cookies: {sorted(names)})"
    return "; ".join(f"{c.name}={c.value}" for c in jar)


# --- the sockets, in a child process -------------------------------------------------------


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class _Socket:
    """A client WebSocket reduced to what the benchmark needs: the handshake, unmasked
    server frames parsed from a byte buffer, pongs for the server's pings, and the time
    each marker value first arrived. Lean on purpose: with 1,000 sockets a full client
    library (asyncio, per-frame objects) costs the client more CPU than the server spends,
    and its lag would be measured as the server's latency."""

    def __init__(self, host: str, port: int, path: str, headers: dict[str, str]) -> None:
        self.sock = socket.create_connection((host, port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {host}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *(f"{name}: {value}" for name, value in headers.items()),
        ]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buffer = b""
        self.seen: dict[int, float] = {}
        #: Bytes of the pushes that carried each marker value.
        self.sizes: dict[int, int] = {}
        self.closed = False

    def finish_handshake(self) -> None:
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed during the handshake")
            self.buffer += chunk
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(head.split(b"\r\n", 1)[0].decode())
        self.sock.setblocking(False)

    def read(self, now: float) -> None:
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        if not chunk:
            self.closed = True
            return
        self.buffer += chunk
        self._frames(now)

    def _frames(self, now: float) -> None:
        data = self.buffer
        while len(data) >= 2:
            opcode, size, at = data[0] & 0x0F, data[1] & 0x7F, 2
            if size == 126:
                if len(data) < 4:
                    break
                size, at = struct.unpack(">H", data[2:4])[0], 4
            elif size == 127:
                if len(data) < 10:
                    break
                size, at = struct.unpack(">Q", data[2:10])[0], 10
            if len(data) < at + size:
                break
            payload, data = data[at : at + size], data[at + size :]
            if opcode in (0x0, 0x1):
                found = MARKER.search(payload)
                if found:
                    marker = int(found.group(1))
                    self.seen.setdefault(marker, now)
                    self.sizes[marker] = self.sizes.get(marker, 0) + len(payload)
            elif opcode == 0x9:  # ping: a masked pong with the same payload
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
            elif opcode == 0x8:
                self.closed = True
        self.buffer = data


def _sockets(url: str, headers: dict[str, str], n: int, pipe: Connection) -> None:
    parsed = urllib.parse.urlsplit(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    sockets: list[_Socket] = []
    for start in range(0, n, CONNECT_BATCH):
        batch = [
            _Socket(host, port, parsed.path, headers)
            for _ in range(start, min(n, start + CONNECT_BATCH))
        ]
        for client in batch:
            try:
                client.finish_handshake()
            except OSError as exc:
                print(f"  a socket failed to open: {exc!r}", file=sys.stderr)
                continue
            sockets.append(client)
    selector = selectors.DefaultSelector()
    for client in sockets:
        selector.register(client.sock, selectors.EVENT_READ, client)

    def pump(timeout: float) -> None:
        for key, _ in selector.select(timeout):
            key.data.read(time.monotonic())

    # Every socket got its first state (the snapshot or a fresh render) before writes start.
    deadline = time.monotonic() + 120
    while any(not c.seen for c in sockets) and time.monotonic() < deadline:
        pump(0.5)
    pipe.send(len(sockets))
    while not pipe.poll(0):
        pump(0.05)
    pipe.recv()  # "stop"
    for client in sockets:
        client.sock.close()
    pipe.send(([client.seen for client in sockets], sockets[0].sizes if sockets else {}))


def _socket_process(url: str, headers: dict[str, str], n: int, pipe: Connection) -> None:
    _raise_fd_limit()
    _sockets(url, headers, n, pipe)


# --- one phase ---------------------------------------------------------------------------


def _phase(
    server: _Server,
    client: redis.Redis,
    stream: str,
    path: str,
    cookie: str,
    *,
    n: int,
    writes: int,
    rate: float,
) -> FanoutResult:
    assert server.proc is not None
    url = f"ws://127.0.0.1:{server.port}{path}"
    headers = {"Cookie": cookie, "Origin": server.url}
    mine, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("fork").Process(
        target=_socket_process, args=(url, headers, n, theirs), daemon=True
    )
    child.start()
    try:
        if not mine.poll(300):
            raise RuntimeError(f"{n} sockets did not all open and get a first state in time")
        connected = mine.recv()
        time.sleep(2.0)  # the connect storm's rechecks and renders settle
        idle_cpu = cpu_seconds(server.proc.pid)
        time.sleep(2.0)
        idle_percent = (cpu_seconds(server.proc.pid) - idle_cpu) / 2.0 * 100
        length = int(client.xlen(stream))
        calls, cpu, started = redis_calls(client), cpu_seconds(server.proc.pid), time.monotonic()
        written: list[tuple[int, float]] = []
        for i in range(writes):
            time.sleep(max(0.0, started + i / rate - time.monotonic()))
            at = time.monotonic()
            client.xadd(stream, {"payload": f'{{"bench": "fanout", "i": {i}}}'})
            written.append((length + i + 1, at))
        time.sleep(3.0)  # the last write's push arrives
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(server.proc.pid) - cpu
        commands = redis_calls(client) - calls - writes
        mine.send("stop")
        seen, sizes = mine.recv()
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    latencies: list[float] = []
    dropped = skipped = 0
    for states in seen:
        ordered = sorted(states.items())
        for marker, at in written:
            later = [t for m, t in ordered if m >= marker]
            if not later:
                dropped += 1
                continue
            skipped += marker not in states
            latencies.append((min(later) - at) * 1000)
    latencies.sort()
    q = (
        statistics.quantiles(latencies, n=20, method="inclusive")
        if len(latencies) >= 2
        else latencies * 19
    )
    return FanoutResult(
        sockets=n,
        writes=writes,
        connected=connected,
        dropped=dropped + (n - connected) * writes,
        skipped=skipped,
        p50_ms=statistics.median(latencies) if latencies else float("nan"),
        p95_ms=q[18] if q else float("nan"),
        max_ms=latencies[-1] if latencies else float("nan"),
        cpu_ms_per_update=cpu / writes * 1000,
        redis_commands_per_s=commands / elapsed,
        idle_cpu_percent=idle_percent,
        kb_per_update=statistics.mean([sizes[m] for m, _ in written if m in sizes] or [0]) / 1000,
        load=os.getloadavg()[0],
    )


def fanout_scale(
    *,
    sockets: Sequence[int] = (1, 100, 1000),
    writes: int = 30,
    rate: float = 2.0,
    server_command: str | None = None,
    tick: float = 1.0,
) -> list[FanoutResult]:
    """Run the benchmark (see the module docstring); one result per socket count.

    ``server_command`` is split like a shell line, with ``{python}`` (this interpreter) and
    ``{port}`` filled in; it must serve ``dashboard.asgi:application`` on 127.0.0.1.
    """
    _raise_fd_limit()  # inherited by the server process
    redis_server = RedisServer().start()
    server = _Server(redis_url=redis_server.url, tick=tick)
    server.command = server_command or server_command_of(DEFAULT_SERVER)
    results = []
    try:
        client = redis.Redis.from_url(redis_server.url)
        ids = seed(client)
        server.start()
        cookie = login_cookie(server)
        # dashboard.routing's socket path of the group surface (plain names, no escaping).
        path = f"/ws/streams/{ids['orders']}/groups/billing/"
        for n in sockets:
            result = _phase(
                server, client, ids["orders"], path, cookie, n=n, writes=writes, rate=rate
            )
            print(f"  measured {n} sockets: {result}", file=sys.stderr)
            results.append(result)
            time.sleep(2.0)  # the sockets' disconnects are handled
    finally:
        server.cleanup()
        redis_server.cleanup()
    return results


def table(results: Sequence[FanoutResult], *, rate: float) -> str:
    writes = results[0].writes if results else 0
    lines = [
        f"Live fan-out on one web process: {writes} XADDs at {rate:g}/s to the stream of one "
        "group page, every socket on that page",
        f"{'sockets':>8} {'dropped':>8} {'skipped':>8} {'p50 ms':>7} {'p95 ms':>7} "
        f"{'max ms':>7} {'CPU ms/update':>14} {'idle CPU %':>11} {'Redis cmd/s':>12} "
        f"{'KB/push':>8} {'load':>5}",
    ]
    for r in results:
        lines.append(
            f"{r.sockets:>8} {r.dropped:>8} {r.skipped:>8} {r.p50_ms:>7.0f} {r.p95_ms:>7.0f} "
            f"{r.max_ms:>7.0f} {r.cpu_ms_per_update:>14.1f} {r.idle_cpu_percent:>11.1f} "
            f"{r.redis_commands_per_s:>12.1f} {r.kb_per_update:>8.1f} {r.load:>5.1f}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sockets", default="1,100,1000")
    parser.add_argument("--writes", type=int, default=30)
    parser.add_argument("--rate", type=float, default=2.0, help="writes per second")
    parser.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        help=f"one of {', '.join(SERVERS)} (production flags), or a whole command line "
        "with {python} and {port}",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.sockets.split(",")]
    command = server_command_of(args.server) if args.server in SERVERS else args.server
    results = fanout_scale(
        sockets=counts, writes=args.writes, rate=args.rate, server_command=command
    )
    print(table(results, rate=args.rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
