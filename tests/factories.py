"""Small builders that keep tests short. They talk to real Redis."""

from __future__ import annotations

import redis


def add_entries(
    r: redis.Redis, stream: str, n: int, *, fields: dict[str, str] | None = None
) -> list[str]:
    """XADD ``n`` entries (pipelined) and return their ids."""
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, fields or {"n": str(i), "payload": f'{{"n": {i}}}'})
    return [i.decode() for i in pipe.execute()]


def make_group(r: redis.Redis, stream: str, group: str, start: str = "0") -> None:
    r.xgroup_create(stream, group, id=start, mkstream=True)


def make_pending(
    r: redis.Redis, stream: str, group: str, consumer: str, n: int, *, create: bool = True
) -> list[str]:
    """Add ``n`` entries and deliver them to ``consumer`` without acking: they stay pending."""
    if create:
        try:
            make_group(r, stream, group)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
    ids = add_entries(r, stream, n)
    delivered: set[str] = set()
    while True:
        reply = r.xreadgroup(group, consumer, {stream: ">"}, count=1000)
        if not reply or not reply[0][1]:
            break
        delivered.update(entry[0].decode() for entry in reply[0][1])
    missing = set(ids) - delivered
    if missing:
        raise AssertionError(f"{len(missing)} entries were not delivered to {consumer}")
    return ids
