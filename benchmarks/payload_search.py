"""Does a payload search stay within its budget on a large stream, and how far does one
request get?

Fills a private redis-server with ``--entries`` entries (a ~300-byte JSON payload each),
then runs a ``contains`` search and a JSON-path search for the one entry that matches,
Continue after Continue until done, with the dashboard's default budget (5,000 entries or
250 ms per request). Prints, per search: the requests it took, the longest request (the
budget plus at most one entry), the entries one request scanned on average, and the total.

    uv run python -m benchmarks.payload_search [--entries 200000]
"""

from __future__ import annotations

import argparse
import json
import time

import redis

from queue_core.payload_search import search_query, stream_search
from tests.redis_server import RedisServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000)
    args = parser.parse_args()
    server = RedisServer()
    server.start()
    try:
        r = redis.Redis.from_url(server.url)
        pipe = r.pipeline(transaction=False)
        for i in range(args.entries):
            doc = {"customer": {"id": f"c-{i}"}, "items": [{"sku": "A", "n": i}], "note": "x" * 200}
            pipe.xadd("s", {"payload": json.dumps(doc)})
            if i % 5000 == 4999:
                pipe.execute()
        pipe.execute()
        target = f"c-{args.entries // 2}"
        for op, path, value in (("contains", "", f'"{target}"'), ("json", "$.customer.id", target)):
            query = search_query(field="payload", op=op, value=value, path=path)
            after, requests, found, longest = None, 0, 0, 0.0
            started = time.perf_counter()
            while True:
                t = time.perf_counter()
                got = stream_search(client=r, stream="s", query=query, after=after)
                longest = max(longest, time.perf_counter() - t)
                requests += 1
                found += len(got.matches)
                if got.done:
                    break
                after = got.cursor
            total = time.perf_counter() - started
            print(
                f"{op:8} {args.entries} entries: {requests} requests, longest "
                f"{longest * 1000:.0f} ms, {args.entries // requests} entries a request, "
                f"{total:.1f} s in all, {found} found"
            )
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
