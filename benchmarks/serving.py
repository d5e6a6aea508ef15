"""How fast are the pages and sockets end to end, the way a user meets them?

Starts a private redis-server and the production web process as a process
(``dashboard.runtime.serve``: the chosen ASGI server, production settings with DEBUG off,
``DJANGO_HTTPS=0`` on loopback, the real channel layers) over a private SQLite database
in a temp ``ACKBOARD_HOME`` with one user who holds the operator role (view_queues and
every action; not a superuser). It logs in through the login form (session cookie) and
times real requests on one keep-alive connection, as a browser sends them
(``Accept-Encoding: gzip``):

- ``group``: the group page over a 1,000,000-entry pending list, the first page and a
  deep page (~90 % deep, through the pager's own cursor parameter), and the first page
  with the stream written (one entry added and delivered) before each request, so that
  no rendering of an unchanged region can be reused: what a busy group's page costs;
- ``overview``: the overview at 500 and at 10,000 streams (each one group, 5 entries,
  3 pending), the first page as a user opens it;
- ``fanout``: the 1,000-socket fan-out, from ``benchmarks.fanout_scale`` when it exists;
- ``compare``: the ASGI servers side by side (``--servers``): requests per second on
  ``/healthz`` and on the group page from C keep-alive connections for T seconds, and a
  100-socket broadcast (every socket's updates, server CPU per update).

Each figure is the median of ``--repeat`` (>= 15) requests after a warm-up, printed beside
the median ``/healthz`` round trip of the same server process in the same run (each
sample is a ``/healthz`` then the page, so drift hits both), with the ratio. Page weights
are the bytes on the wire and, when the response was compressed, the bytes uncompressed.

Each data set is seeded once, before any server starts, and each phase runs its own web
process whose ``ACKBOARD_STREAMS`` allowlist sees only its data set, so no discovery cache
can carry one phase's streams into the next.

    uv run python -m benchmarks.serving [--server uvicorn] [--quick] [--only group,overview]
    uv run python -m benchmarks.serving --only group --db postgres   # pooled, then not
    uv run python -m benchmarks.serving --only compare [--servers daphne,uvicorn,granian]
    uv run python -m benchmarks.serving --only compare --servers uvicorn,uvicorn+--ws=wsproto
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import http.client
import os
import re
import shlex
import statistics
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from dashboard.runtime.serve import DEFAULT_SERVER, SERVERS, server_argv
from tests.browser.server import LiveServer
from tests.redis_server import RedisServer

PEL_STREAM = "bench:pel:orders"
PEL_GROUP = "billing"
CONSUMERS = tuple(f"worker-{i}" for i in range(8))
#: (pending entries, stream counts): the issue's sizes, and --quick's.
FULL: tuple[int, tuple[int, ...]] = (1_000_000, (500, 10_000))
QUICK: tuple[int, tuple[int, ...]] = (50_000, (50, 500))
PHASES = ("group", "overview", "fanout", "compare")

# Server-side fill: XADD ARGV[1] entries; returns the id of the last one.
_ADD = """
local id
for i = 1, tonumber(ARGV[1]) do
  id = redis.call('XADD', KEYS[1], '*', 'order', ARGV[2] + i, 'payload',
    '{"order": ' .. (ARGV[2] + i) .. ', "sku": "A-' .. (i % 97) .. '", "qty": 1}')
end
return id
"""
# Deliver up to ARGV[3] new entries to consumer ARGV[2] of group ARGV[1]; returns how many.
_DELIVER = """
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
  'STREAMS', KEYS[1], '>')
if not r then return 0 end
return #r[1][2]
"""


# --- seeding ------------------------------------------------------------------------------


def seed_pel(client: redis.Redis, n: int) -> str:
    """``n`` entries pending in one group over 8 consumers; returns the id ~90 % deep.

    Lua loops of 50,000 XADDs, then XREADGROUP COUNT 50,000 per consumer in turn: no
    per-entry round trip (a 1,000,000-entry fill takes a few seconds, printed).
    """
    add = client.register_script(_ADD)
    deliver = client.register_script(_DELIVER)
    client.delete(PEL_STREAM)
    client.xgroup_create(PEL_STREAM, PEL_GROUP, id="0", mkstream=True)
    step = max(1, min(50_000, n // 20))  # 5 % steps at most: one ends at 90 %
    deep = ""
    for start in range(0, n, step):
        last = add(keys=[PEL_STREAM], args=[min(step, n - start), start])
        if not deep and start + step >= n * 9 // 10:
            deep = last.decode()
    delivered, turn = 0, 0
    while delivered < n:
        got = int(deliver(keys=[PEL_STREAM], args=[PEL_GROUP, CONSUMERS[turn % 8], step]))
        if not got:
            break
        delivered += got
        turn += 1
    summary: Any = client.xpending(PEL_STREAM, PEL_GROUP)
    if summary["pending"] != n:
        raise SystemExit(f"only {summary['pending']} of {n} entries are pending")
    return deep


def stream_prefix(count: int) -> str:
    return f"bench:s{count}:"


def seed_streams(client: redis.Redis, count: int) -> None:
    """``count`` streams under ``stream_prefix(count)``: one group, 5 entries, 3 pending."""
    prefix = stream_prefix(count)
    for base in range(0, count, 500):
        pipe = client.pipeline(transaction=False)
        for i in range(base, min(count, base + 500)):
            name = f"{prefix}{i:05d}"
            pipe.delete(name)
            pipe.xgroup_create(name, "g", id="0", mkstream=True)
            for j in range(5):
                pipe.xadd(name, {"n": str(j)})
            pipe.xreadgroup("g", "c", {name: ">"}, count=3)
        pipe.execute()


# --- an HTTP client as a browser is one ---------------------------------------------------


@dataclass
class Response:
    status: int
    body: bytes  # uncompressed
    wire: int  # bytes of the body on the wire
    encoding: str
    headers: dict[str, str]


class Browser:
    """One keep-alive HTTP/1.1 connection with a cookie jar (session, CSRF)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.cookies: dict[str, str] = {}
        self.conn = http.client.HTTPConnection(host, port, timeout=120)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        sent = {"Accept-Encoding": "gzip", "Host": f"{self.host}:{self.port}"}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        sent.update(headers or {})
        try:
            self.conn.request(method, path, body=body, headers=sent)
            raw = self.conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
            self.conn.request(method, path, body=body, headers=sent)
            raw = self.conn.getresponse()
        wire = raw.read()
        for value in raw.headers.get_all("Set-Cookie") or []:
            name, _, rest = value.partition("=")
            self.cookies[name.strip()] = rest.split(";", 1)[0]
        encoding = raw.headers.get("Content-Encoding", "")
        content = gzip.decompress(wire) if encoding == "gzip" else wire
        return Response(raw.status, content, len(wire), encoding, dict(raw.headers.items()))

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def login(self, username: str, password: str) -> None:
        form = self.get("/login/")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', form.body)
        if form.status != 200 or token is None:
            raise SystemExit(f"no login form: {form.status}")
        body = urllib.parse.urlencode(
            {"csrfmiddlewaretoken": token.group(1).decode(), "username": username,
             "password": password, "next": "/"}
        ).encode()  # fmt: skip
        done = self.request(
            "POST",
            "/login/",
            body,
            {
                "Content-Type": "application/x-www-form-urlencoded",
                "Referer": f"http://{self.host}:{self.port}/login/",
                "Origin": f"http://{self.host}:{self.port}",
            },
        )
        if done.status != 302 or "sessionid" not in self.cookies:
            raise SystemExit(f"login failed: {done.status} {done.body[:300]!r}")

    def close(self) -> None:
        self.conn.close()


# --- timing -------------------------------------------------------------------------------


@dataclass
class Figure:
    label: str
    page_ms: float
    healthz_ms: float
    wire: int
    raw: int
    encoding: str
    #: The goal: at most this many times /healthz, and (if set) under this many ms.
    goal_ratio: float | None = None
    goal_ms: float | None = None

    @property
    def ratio(self) -> float:
        return self.page_ms / self.healthz_ms if self.healthz_ms else float("inf")

    def verdict(self) -> str:
        if self.goal_ratio is None:
            return ""
        goal = f"<= {self.goal_ratio:g}x" + (f", < {self.goal_ms:g} ms" if self.goal_ms else "")
        met = self.ratio <= self.goal_ratio and (
            self.goal_ms is None or self.page_ms < self.goal_ms
        )
        return f"  goal {goal}: {'ok' if met else 'MISSED'}"


def measure(
    browser: Browser,
    label: str,
    path: str,
    *,
    repeat: int,
    warmup: int = 3,
    check: Callable[[Response], None] | None = None,
    before: Callable[[], None] | None = None,
) -> Figure:
    """Median of ``repeat`` GETs of ``path``, each just after a ``/healthz`` (its baseline).

    ``before`` runs (untimed) before each timed pair: a write that changes what the page
    shows, so that nothing rendered for the previous request can be reused.
    """
    for _ in range(warmup):
        browser.get("/healthz")
        last = browser.get(path)
        if last.status != 200:
            raise SystemExit(f"{path}: HTTP {last.status}: {last.body[:500]!r}")
    if check is not None:
        check(last)
    pages: list[float] = []
    healths: list[float] = []
    for _ in range(repeat):
        if before is not None:
            before()
        began = time.perf_counter()
        health = browser.get("/healthz")
        healths.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        last = browser.get(path)
        pages.append((time.perf_counter() - began) * 1000)
        if health.status != 200 or last.status != 200:
            raise SystemExit(f"{path}: HTTP {last.status}, /healthz {health.status}")
    return Figure(
        label,
        statistics.median(pages),
        statistics.median(healths),
        last.wire,
        len(last.body),
        last.encoding,
    )


def print_figures(figures: list[Figure], title: str) -> None:
    print(f"\n{title}")
    print(
        f"  {'page':<40} {'median':>9} {'/healthz':>9} {'x healthz':>10} "
        f"{'wire bytes':>11} {'raw bytes':>10}"
    )
    for f in figures:
        print(
            f"  {f.label:<40} {f.page_ms:7.1f}ms {f.healthz_ms:7.2f}ms {f.ratio:9.1f}x "
            f"{f.wire:>11,} {f.raw:>10,}{'  ' + f.encoding if f.encoding else '      '}"
            f"{f.verdict()}"
        )


# --- the web process ----------------------------------------------------------------------


@contextmanager
def web_process(
    redis_url: str, server: str, streams: str, env: dict[str, str] | None = None
) -> Iterator[LiveServer]:
    """The production web process over a fresh database with one operator; stopped after.

    ``server`` is a name from ``dashboard.runtime.serve.SERVERS``, optionally with extra flags
    after ``+`` (``uvicorn+--ws-per-message-deflate=true``) to compare a variant. ``env``
    adds to its environment (``DATABASE_URL`` for ``--db postgres``).
    """
    name, *extra = server.split("+")
    web = LiveServer(
        redis_url=redis_url,
        streams=streams,
        server=name,
        server_args=tuple(extra),
        role="operator",
        extra_env={"ACKBOARD_MAX_STREAMS": "20000", **(env or {})},
    )
    try:
        yield web.start(timeout=60)
    finally:
        web.cleanup()


@contextmanager
def logged_in(web: LiveServer) -> Iterator[Browser]:
    browser = Browser("127.0.0.1", web.port)
    browser.login(web.username, web.password)
    try:
        yield browser
    finally:
        browser.close()


def group_path(stream: str, group: str) -> str:
    quote = urllib.parse.quote
    return f"/streams/{quote(stream, safe='')}/groups/{quote(group, safe='')}/"


def deep_path(first: Response, base: str, deep_id: str) -> str:
    """The pager's "next" link on ``first``, with its cursor set to ``deep_id``.

    Taken from the page itself, so the benchmark follows whatever parameter the pager
    uses (``start`` today).
    """
    hrefs = re.findall(rb'<a class="btn" href="(\?[^"]+)"', first.body)
    if not hrefs:
        raise SystemExit("the group page has no pager link")
    query = urllib.parse.parse_qsl(hrefs[-1].decode().replace("&amp;", "&")[1:])
    if not query:
        raise SystemExit(f"pager link without a cursor: {hrefs[-1]!r}")
    # The cursor is the parameter whose value is an entry id.
    cursor = next(
        (k for k, v in query if re.fullmatch(r"\d+-\d+", v.lstrip("(")) is not None), None
    )
    if cursor is None:
        raise SystemExit(f"no entry-id cursor in the pager link: {hrefs[-1]!r}")
    params = [(k, deep_id if k == cursor else v) for k, v in query]
    return base + "?" + urllib.parse.urlencode(params)


def run_group(
    redis_url: str,
    server: str,
    entries: int,
    deep_id: str,
    repeat: int,
    env: dict[str, str] | None = None,
    database: str = "SQLite",
) -> None:
    client = redis.Redis.from_url(redis_url)
    added = 0

    def write() -> None:
        # One more pending entry at the head: the snapshot id, the counts and the pending
        # list all change, so no stored rendering of the page can be served.
        nonlocal added
        added += 1
        client.xadd(PEL_STREAM, {"order": f"bench-{added}"})
        client.xreadgroup(PEL_GROUP, CONSUMERS[0], {PEL_STREAM: ">"}, count=1)

    with web_process(redis_url, server, PEL_STREAM, env) as web, logged_in(web) as browser:
        base = group_path(PEL_STREAM, PEL_GROUP)
        first = browser.get(base)
        deep = deep_path(first, base, deep_id)

        def shows_entries(response: Response) -> None:
            # One selection checkbox per pending row.
            if response.body.count(b'name="ids"') < 10:
                raise SystemExit("the group page shows no pending rows")

        figures = [
            measure(browser, "group page, first page", base, repeat=repeat, check=shows_entries),
            measure(browser, "group page, 90% deep page", deep, repeat=repeat, check=shows_entries),
            # Nothing reusable: the stream is written before each request (what a busy
            # group's page costs; the two above reuse the renderings of unchanged regions).
            measure(
                browser,
                "group page, written before each",
                base,
                repeat=repeat,
                check=shows_entries,
                before=write,
            ),
        ]
        for figure in figures:
            figure.goal_ratio, figure.goal_ms = 3, 25
        print_figures(
            figures,
            f"Group page, {entries:,} pending in one group ({server}, {database}, "
            f"{deep.split('?')[1]})",
        )
        if env and "DATABASE_URL" in env:
            from tests.postgres_server import client_backends

            opened = len(client_backends(env["DATABASE_URL"]))
            print(f"  PostgreSQL connections open after the figures: {opened}")


@contextmanager
def private_postgres() -> Iterator[str]:
    """A private PostgreSQL (tests.postgres_server) for ``--db postgres``: its URL."""
    from tests.postgres_server import running_postgres

    with running_postgres() as server:
        yield server.url


#: The overview's "Streams 1–50 of N" (its pager position; N is what the index holds now).
_OVERVIEW_OF = re.compile(rb'id="overview-position">[^<]*? of (\d[\d,]*)')


def overview_ready(browser: Browser, count: int, timeout: float = 180.0) -> float:
    """Seconds until the overview's stream index lists all ``count`` streams.

    The index is built by the first request and completed by a background refresher
    (dashboard.insight.stream_index); the figures are taken once it is complete, as a user who
    opens the page a minute after the process started meets it.
    """
    began = time.monotonic()
    while True:
        found = _OVERVIEW_OF.search(browser.get("/").body)
        if found is None:
            print("  (the overview shows no 'of N' position; measuring as it is)")
            return time.monotonic() - began
        if int(found.group(1).replace(b",", b"")) >= count:
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            raise SystemExit(f"the overview lists {found.group(1)!r} of {count} after {timeout} s")
        time.sleep(0.5)


def run_overview(redis_url: str, server: str, counts: tuple[int, ...], repeat: int) -> None:
    figures: list[Figure] = []
    for count in counts:
        prefix = stream_prefix(count)
        with web_process(redis_url, server, prefix + "*") as web, logged_in(web) as browser:

            def lists_streams(response: Response, prefix: str = prefix) -> None:
                if response.body.count(prefix.encode()) == 0:
                    raise SystemExit(f"the overview shows none of {prefix}*")

            waited = overview_ready(browser, count)
            figures.append(
                measure(browser, f"overview, {count:,} streams", "/", repeat=repeat,
                        check=lists_streams)
            )  # fmt: skip
            figures[-1].goal_ratio = 5
            body = browser.get("/").body
            shown = len(set(re.findall(rf"{re.escape(prefix)}\d+".encode(), body)))
            print(
                f"  ({count:,} streams: all listed {waited:.1f} s after the first request; "
                f"the first page links {shown:,} of them)"
            )
    print_figures(figures, f"Overview ({server})")


# --- fan-out ------------------------------------------------------------------------------


def run_fanout(server: str, quick: bool) -> None:
    """The 1,000-socket fan-out: ``benchmarks.fanout_scale`` on the same server command.

    It starts its own Redis and web process (the shop's seed, one group page's surface).
    """
    from benchmarks import fanout_scale

    name, *extra = server.split("+")
    argv = server_argv(name, host="127.0.0.1", port="{port}", python="{python}", extra=extra)
    sockets = (1, 100) if quick else (1, 100, 1000)
    writes, rate = (10 if quick else 30), 2.0
    results = fanout_scale.fanout_scale(
        sockets=sockets, writes=writes, rate=rate, server_command=shlex.join(argv)
    )
    print(f"\n{fanout_scale.table(results, rate=rate)}  ({server})")


# --- the ASGI servers side by side --------------------------------------------------------


@dataclass
class Rate:
    """Requests per second from C clients, and the server's CPU per request."""

    per_second: float
    cpu_ms: float


def http_rate(
    port: int, pid: int, path: str, cookies: dict[str, str], connections: int, seconds: float
) -> Rate:
    """``connections`` keep-alive clients (threads) requesting ``path`` for ``seconds``.

    The server's CPU per request (utime + stime of its process tree) is the figure that
    holds on a shared machine; requests per second also count the clients' share of it.
    """
    stop = threading.Event()
    counts = [0] * connections
    errors: list[str] = []

    def client(i: int) -> None:
        browser = Browser("127.0.0.1", port)
        browser.cookies = dict(cookies)
        while not stop.is_set():
            response = browser.get(path)
            if response.status != 200:
                errors.append(f"{path}: {response.status}")
                return
            counts[i] += 1
        browser.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(connections)]
    cpu0 = cpu_seconds(pid)
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    elapsed = time.perf_counter() - began
    cpu = cpu_seconds(pid) - cpu0
    if errors:
        raise SystemExit(errors[0])
    done = sum(counts)
    return Rate(done / elapsed, cpu / max(1, done) * 1000)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its children (granian serves from a child)."""
    total = 0.0
    ticks = 100.0
    pids = [pid]
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                pids.append(int(proc.name))
    for each in pids:
        try:
            fields = (Path("/proc") / str(each) / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


async def _broadcast(
    port: int, cookies: dict[str, str], path: str, sockets: int, seconds: float,
    produce: Callable[[], None], pid: int,
) -> tuple[list[int], float, int]:  # fmt: skip
    """(updates per socket, server CPU seconds, producer writes) over ``seconds``."""
    import websockets

    headers = {
        "Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()),
        "Origin": f"http://127.0.0.1:{port}",
    }
    received = [0] * sockets
    counting = False
    conns = []
    for _ in range(sockets):
        conns.append(
            await websockets.connect(
                f"ws://127.0.0.1:{port}{path}", additional_headers=headers, max_size=None
            )
        )

    async def reader(i: int, ws: Any) -> None:
        try:
            async for _ in ws:
                if counting:
                    received[i] += 1
        except websockets.ConnectionClosed:
            pass

    readers = [asyncio.create_task(reader(i, ws)) for i, ws in enumerate(conns)]
    await asyncio.sleep(3.0)  # first renders are done
    counting = True
    cpu0 = cpu_seconds(pid)
    writes = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.to_thread(produce)
        writes += 1
        await asyncio.sleep(0.5)
    await asyncio.sleep(2.0)  # the last update's fan-out
    counting = False
    cpu = cpu_seconds(pid) - cpu0
    for ws in conns:
        await ws.close()
    for task in readers:
        task.cancel()
    return received, cpu, writes


@dataclass
class ServerRun:
    """One server's figures in one round of ``--only compare``."""

    healthz: Rate
    group: Rate
    healthz_ms: float
    group_ms: float
    fewest_updates: int
    most_updates: int
    cpu_us_per_socket_update: float


def compare_once(
    redis_url: str, client: redis.Redis, server: str, seconds: float, sockets: int, connections: int
) -> ServerRun:
    with web_process(redis_url, server, PEL_STREAM) as web, logged_in(web) as browser:
        assert web.proc is not None
        pid = web.proc.pid
        group = group_path(PEL_STREAM, PEL_GROUP)
        http_rate(web.port, pid, "/healthz", browser.cookies, connections, 1.0)  # warm-up
        http_rate(web.port, pid, group, browser.cookies, connections, 1.0)
        healthz = http_rate(web.port, pid, "/healthz", browser.cookies, connections, seconds)
        page = http_rate(web.port, pid, group, browser.cookies, connections, seconds)
        single = measure(browser, "group", group, repeat=15)

        def produce() -> None:
            client.xadd(PEL_STREAM, {"payload": "{}"})

        received, cpu, _ = asyncio.run(
            _broadcast(web.port, browser.cookies, f"/ws{group}", sockets, seconds, produce, pid)
        )
        return ServerRun(
            healthz, page, single.healthz_ms, single.page_ms, min(received), max(received),
            cpu / max(1, sum(received)) * 1e6,
        )  # fmt: skip


def run_compare(
    redis_url: str,
    client: redis.Redis,
    servers: list[str],
    quick: bool,
    connections: int,
    rounds: int,
) -> None:
    """Each server ``rounds`` times, the order reversed every other round; medians."""
    seconds = 3.0 if quick else 10.0
    sockets = 20 if quick else 100
    runs: dict[str, list[ServerRun]] = {server: [] for server in servers}
    for turn in range(rounds):
        for server in servers if turn % 2 == 0 else servers[::-1]:
            run = compare_once(redis_url, client, server, seconds, sockets, connections)
            runs[server].append(run)
            print(f"  round {turn + 1}: {server} {run}", file=sys.stderr)
    print(
        f"\nASGI servers, median of {rounds} rounds ({connections} keep-alive connections x "
        f"{seconds:.0f} s per figure; {sockets} sockets on the group page, an XADD every "
        f"0.5 s for {seconds:.0f} s)"
    )
    width = max(8, *(len(server) for server in runs))
    print(
        f"  {'server':<{width}} {'/healthz req/s':>14} {'CPU ms/req':>10} {'group req/s':>11} "
        f"{'CPU ms/req':>10} {'/healthz ms':>11} {'group ms':>9} {'updates/socket':>15} "
        f"{'CPU us/socket-update':>20}"
    )
    med = statistics.median
    for server, done in runs.items():
        print(
            f"  {server:<{width}} {med(r.healthz.per_second for r in done):>14,.0f} "
            f"{med(r.healthz.cpu_ms for r in done):>10.2f} "
            f"{med(r.group.per_second for r in done):>11,.1f} "
            f"{med(r.group.cpu_ms for r in done):>10.1f} "
            f"{med(r.healthz_ms for r in done):>11.2f} {med(r.group_ms for r in done):>9.1f} "
            f"{f'{min(r.fewest_updates for r in done)}-{max(r.most_updates for r in done)}':>15} "
            f"{med(r.cpu_us_per_socket_update for r in done):>20,.0f}"
        )


# --- main ---------------------------------------------------------------------------------


def _load() -> str:
    """The machine's 1, 5 and 15 minute load averages: a busy machine slows every figure
    (the page and its /healthz baseline alike), so each run says how busy it was."""
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help=f"one of {', '.join(SERVERS)}")
    parser.add_argument("--quick", action="store_true", help="small seeds: a smoke run")
    parser.add_argument(
        "--only", default="group,overview,fanout", help=f"comma list of {', '.join(PHASES)}"
    )
    parser.add_argument(
        "--servers",
        default=",".join(SERVERS),
        help="for --only compare: names, each optionally with extra flags after '+'",
    )
    parser.add_argument(
        "--db",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: the group page over a private PostgreSQL, pooled and not",
    )
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--connections", type=int, default=8, help="for --only compare")
    parser.add_argument("--rounds", type=int, default=2, help="for --only compare")
    args = parser.parse_args()
    phases = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(sorted(unknown))}")
    if args.repeat < 15 and not args.quick:
        parser.error("--repeat must be at least 15 (medians of fewer are noise)")
    entries, counts = QUICK if args.quick else FULL

    redis_server = RedisServer().start()
    try:
        client = redis.Redis.from_url(redis_server.url, socket_timeout=300)
        version = client.info("server")["redis_version"]
        print(f"redis-server {version} on port {redis_server.port}; server {args.server}")
        print(f"  load average at the start: {_load()} (ratios are comparable, times are not)")
        deep_id = ""
        if {"group", "compare"} & set(phases):
            began = time.perf_counter()
            deep_id = seed_pel(client, entries)
            print(f"  seeded {entries:,} pending entries in {time.perf_counter() - began:.1f} s")
        if "overview" in phases:
            for count in counts:
                began = time.perf_counter()
                seed_streams(client, count)
                print(f"  seeded {count:,} streams in {time.perf_counter() - began:.1f} s")
        if "group" in phases and args.db == "postgres":
            with private_postgres() as url:
                for pool, name in (("20", "PostgreSQL, pooled"), ("0", "PostgreSQL, no pool")):
                    env = {"DATABASE_URL": url, "ACKBOARD_DB_POOL_SIZE": pool}
                    run_group(
                        redis_server.url, args.server, entries, deep_id, args.repeat, env, name
                    )
        elif "group" in phases:
            run_group(redis_server.url, args.server, entries, deep_id, args.repeat)
        if "overview" in phases:
            run_overview(redis_server.url, args.server, counts, args.repeat)
        if "fanout" in phases:
            run_fanout(args.server, args.quick)
        if "compare" in phases:
            servers = [s.strip() for s in args.servers.split(",") if s.strip()]
            run_compare(
                redis_server.url, client, servers, args.quick, args.connections, args.rounds
            )
    finally:
        redis_server.cleanup()
    print(f"\nload average at the end: {_load()}")
    print(f"({shlex.join(['uv', 'run', 'python', '-m', 'benchmarks.serving', *sys.argv[1:]])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
