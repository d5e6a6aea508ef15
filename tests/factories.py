"""Small builders that keep tests short. They talk to real Redis (and the test database)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import redis

from queue_core.errors import group_exists
from queue_core.keys import stream_keys

if TYPE_CHECKING:
    from dashboard.models import IndexedFailure


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
            if not group_exists(exc):
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


def age_pending(
    r: redis.Redis, stream: str, group: str, idle_ms: int, ids: list[str] | None = None
) -> list[str]:
    """Make ``group``'s pending entries (``ids``, or all of them up to 10,000) idle for
    ``idle_ms`` now, without waiting for time to pass: Redis's own means, XCLAIM to each
    entry's owner with IDLE and JUSTID, keeps the owner and the delivery count. An entry
    deleted from the stream leaves the PEL on Redis 7+, so age before XDEL. Returns the
    ids aged."""
    wanted = None if ids is None else set(ids)
    by_owner: dict[str, list[str]] = {}
    for row in r.xpending_range(stream, group, "-", "+", 10_000):
        entry_id = row["message_id"].decode()
        if wanted is None or entry_id in wanted:
            by_owner.setdefault(row["consumer"].decode(), []).append(entry_id)
    for owner, chosen in by_owner.items():
        r.xclaim(stream, group, owner, 0, chosen, idle=idle_ms, justid=True)
    aged = [entry_id for chosen in by_owner.values() for entry_id in chosen]
    if wanted is not None and set(aged) != wanted:
        raise AssertionError(f"not pending in {group}: {sorted(wanted - set(aged))}")
    return aged


class CountingRedis(redis.Redis):
    """A real client that counts its round trips: one per command outside a pipeline,
    one per pipeline execution."""

    round_trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.round_trips += 1
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        execute = pipe.execute

        def counted(raise_on_error: bool = True) -> Any:
            self.round_trips += 1
            return execute(raise_on_error=raise_on_error)

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe


class RecordingRedis(CountingRedis):
    """Counts round trips and keeps each single command's arguments (SCAN is one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands.append(args)
        return super().execute_command(*args, **options)

    @property
    def names(self) -> list[str]:
        """The single commands' names, in order."""
        return [str(c[0]) for c in self.commands]

    def scans(self) -> list[tuple[Any, ...]]:
        return [c for c in self.commands if c and c[0] == "SCAN"]


# -- the failure index ------------------------------------------------------------------

#: The ``failed_at`` of rows made by ``indexed_failure``, plus their ``minutes``.
FAILURE_T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
_failure_seq = itertools.count(1)


def indexed_failure(**overrides: Any) -> IndexedFailure:
    """Save one failure-index row with plausible defaults; ``minutes`` offsets failed_at
    from FAILURE_T0 (default: a new minute per row, so rows sort in creation order)."""
    from dashboard.models import IndexedFailure  # Django only for the tests that use it

    n = next(_failure_seq)
    minutes = overrides.pop("minutes", n)
    values: dict[str, Any] = {
        "failures_key": "{orders}:failures",
        "source_id": f"{n}-0",
        "stream": "orders",
        "group": "billing",
        "entry_id": "1-0",
        "consumer": "c1",
        "attempt": 1,
        "error_type": "ValueError",
        "message": f"boom {n}",
        "traceback": "Traceback (most recent call last):\nValueError: boom",
        "duration_ms": 12.5,
        "failed_at": FAILURE_T0 + timedelta(minutes=minutes),
    }
    values.update(overrides)
    if "failures_key" not in overrides:
        values["failures_key"] = "{" + values["stream"] + "}:failures"
    return IndexedFailure.objects.create(**values)


def add_failure(r: redis.Redis, stream: str, entry_id: str = "1-0", **overrides: Any) -> str:
    """XADD one record to ``stream``'s failures companion, as the worker writes it; a
    field given as None is left out."""
    fields: dict[str, Any] = {
        "group": "billing",
        "entry_id": entry_id,
        "consumer": "worker-1",
        "attempt": "1",
        "error_type": "ValueError",
        "message": "bad total",
        "traceback": "Traceback (most recent call last):\n  ...\nValueError: bad total",
        "duration_ms": "12.5",
        "failed_at_ms": "1767268800000",
    }
    fields.update(overrides)
    fields = {k: v for k, v in fields.items() if v is not None}
    return r.xadd(stream_keys(stream).failures, fields).decode()


def ingest_pending(r: redis.Redis, stream: str) -> int:
    """Records of ``stream``'s failures companion read by the ingestor but not yet acked."""
    from dashboard.insight.failure_index import INGEST_GROUP

    return int(r.xpending(stream_keys(stream).failures, INGEST_GROUP)["pending"])


# -- users -------------------------------------------------------------------------------


def make_user(django_user_model: Any, name: str, *codenames: str) -> Any:
    """A user (password ``pw``) holding the given ``dashboard.*`` permission codenames."""
    from django.contrib.auth.models import Permission  # tests of queue_core load no Django

    user = django_user_model.objects.create_user(username=name, password="pw")
    perms = Permission.objects.filter(content_type__app_label="dashboard", codename__in=codenames)
    user.user_permissions.add(*perms)
    return user
