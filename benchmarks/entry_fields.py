"""Does one large entry slow everyone's pages? The entry page of a 50,000-field entry.

Starts a private redis-server and the production web process (``tests.browser.server``:
production settings, plain HTTP on loopback, one superuser), adds one entry of
``--fields`` small fields, logs in through the login form, and prints:

- the entry page's size (uncompressed) and its median and best time over 5 requests;
- ``/healthz``'s median and worst of 20 requests alone, then while ``--clients`` other
  sessions load that entry page in a loop.

``uv run python -m benchmarks.entry_fields`` (``--fields 50000 --clients 6``).
"""

from __future__ import annotations

import argparse
import http.cookiejar
import re
import statistics
import threading
import time
import urllib.parse
import urllib.request

import redis

from tests.browser.server import LiveServer, serving
from tests.redis_server import RedisServer


def _session(server: LiveServer) -> urllib.request.OpenerDirector:
    """An opener holding a logged-in session cookie (through the login form)."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    page = opener.open(server.url + "/login/").read().decode()
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found is not None, "no CSRF token on the login page"
    form = {"username": server.username, "password": server.password}
    data = urllib.parse.urlencode({**form, "csrfmiddlewaretoken": found.group(1)}).encode()
    headers = {"Referer": server.url + "/login/"}
    opener.open(urllib.request.Request(server.url + "/login/", data, headers=headers)).read()
    return opener


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--fields", type=int, default=50_000)
    parser.add_argument("--clients", type=int, default=6)
    args = parser.parse_args()
    store = RedisServer().start()
    try:
        client = redis.Redis.from_url(store.url)
        fields = {f"field-{i:05d}": f"value number {i}" for i in range(args.fields)}
        entry_id = client.xadd("big", fields).decode()
        with serving(LiveServer(store.url)) as server:
            url = f"{server.url}/streams/big/entries/{entry_id}/"
            mine = _session(server)
            times, body = [], b""
            for _ in range(5):
                start = time.perf_counter()
                body = mine.open(url).read()
                times.append(time.perf_counter() - start)
            print(
                f"entry page: {len(body) / 1e6:.2f} MB, median "
                f"{statistics.median(times) * 1000:.0f} ms, best {min(times) * 1000:.0f} ms"
            )

            def healthz() -> float:
                start = time.perf_counter()
                urllib.request.urlopen(server.url + "/healthz").read()
                return time.perf_counter() - start

            def report(label: str, samples: list[float]) -> None:
                print(
                    f"/healthz {label}: median {statistics.median(samples) * 1000:.1f} ms, "
                    f"worst {max(samples) * 1000:.1f} ms"
                )

            report("alone", [healthz() for _ in range(20)])
            stop = threading.Event()
            ready = threading.Barrier(args.clients + 1)

            def load() -> None:
                opener = _session(server)
                opener.open(url).read()
                ready.wait()
                while not stop.is_set():
                    opener.open(url).read()

            threads = [threading.Thread(target=load) for _ in range(args.clients)]
            for thread in threads:
                thread.start()
            ready.wait()  # every client has loaded the page once and is looping
            try:
                report(
                    f"with {args.clients} clients on the entry page", [healthz() for _ in range(20)]
                )
            finally:
                stop.set()
                for thread in threads:
                    thread.join()
    finally:
        store.cleanup()


if __name__ == "__main__":
    main()
