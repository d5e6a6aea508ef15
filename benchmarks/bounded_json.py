"""What does the depth pre-scan of ``queue_core.bounded_json.json_read`` cost over a bare
``json.loads``?

Times ``json_read`` and ``json.loads`` on the same inputs: a pause key's and a
heartbeat's JSON (a few hundred bytes: the fast path, two ``str.count`` calls), a typical
1 MB document of objects (the full scan), 1 MB of nested arrays 60 deep (the full scan,
all brackets), and the hostile shapes ``json.loads`` cannot read (a million ``[``, 1 MB
of ``[{"a":`` repeated): refused by the scan, where ``json.loads`` raises
RecursionError. Each line is the best of ``--runs`` CPU times (``time.process_time``),
``json_read``'s ratio to ``json.loads`` on the same input.

    uv run python -m benchmarks.bounded_json [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from queue_core.bounded_json import json_read

PAUSE = b'{"by":"ops-oncall","reason":"deploy","at_ms":1700000000000,"until_ms":null}'
HEARTBEAT = json.dumps(
    {"host": "web-1", "pid": 4242, "version": "0.9.0", "concurrency": 8, "running": 3,
     "buffered": 12, "processed": 123456, "failed": 7, "started_ms": 1700000000000,
     "seen_ms": 1700000002000, "paused": False, "pause_at_ms": None}
).encode()  # fmt: skip


def typical(size: int) -> bytes:
    row = {"sku": "A1", "name": "widget [x] {y}", "qty": 3, "price": 1.5, "tags": ["a", "b"]}
    one = len(json.dumps(row)) + 2
    return json.dumps({"items": [row] * (size // one)}).encode()


def nested(size: int, depth: int) -> bytes:
    unit = "[" * depth + "1" + "]" * depth
    return ("[" + ",".join([unit] * (size // (len(unit) + 1))) + "]").encode()


def best(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.process_time()
        with contextlib.suppress(ValueError, RecursionError):
            fn()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    small = {"pause key": PAUSE, "heartbeat": HEARTBEAT}
    loops = 20_000
    large = {
        "typical 1 MB": typical(1_000_000),
        "1 MB nested 60 deep": nested(1_000_000, 60),
        "[ x 1,000,000": b"[" * 1_000_000,
        '[{"a": x 166,000': b'[{"a":' * 166_000,
    }
    for name, data in small.items():
        bare = best(lambda d=data: [json.loads(d) for _ in range(loops)], args.runs) / loops
        read = best(lambda d=data: [json_read(d) for _ in range(loops)], args.runs) / loops
        print(f"{name:22} {len(data):>9} B  json.loads {bare * 1e6:7.2f} µs  "
              f"json_read {read * 1e6:7.2f} µs  ratio {read / bare:5.2f}")  # fmt: skip
    for name, data in large.items():
        bare = best(lambda d=data: json.loads(d), args.runs)
        read = best(lambda d=data: json_read(d, max_size=None), args.runs)
        print(f"{name:22} {len(data):>9} B  json.loads {bare * 1e3:7.2f} ms  "
              f"json_read {read * 1e3:7.2f} ms  ratio {read / bare:5.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
