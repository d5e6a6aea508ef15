"""Fleet control: a group's pause, its workers' heartbeats, and what they add up to.

Owns the two fleet-control keys of a group (names from ``queue_core.keys``, in the
stream's slot) and their JSON:

- the pause, ``{S}:pause:<group>``: a string ``{"by", "reason", "at_ms", "until_ms"}``,
  set with ``PXAT until_ms`` when it resumes by itself. Absent = not paused. Ackboard
  workers read it at least every 0.5 s (``queue_core.worker.heartbeat``), stop reading
  and sweeping while it holds, and confirm it in their heartbeat;
- the heartbeats, ``{S}:workers:<group>``: a hash, consumer name -> the worker's last
  heartbeat (``Heartbeat``), written with ``HSET`` + ``PEXPIRE`` (1 h) in one pipeline
  every ``HEARTBEAT_INTERVAL_MS``, so a group whose workers are all gone loses it by
  itself; each worker also prunes fields not refreshed for an hour (every 30 s). A
  worker that stops (a stop request, after acking what it holds) writes a last one with
  ``stopped_ms``: not live from then on, without waiting ``HEARTBEAT_STALE_MS``. One
  that dies without it (SIGKILL, a lost host) goes stale after ``HEARTBEAT_STALE_MS``.

``fleet_state`` is the pure rule behind "paused by ops-oncall (deploy), 3 of 3 workers
confirmed, 2 jobs still finishing; 1 consumer not pausable". Everything here is
keyword-only and takes ``client: Client`` (a single node or a cluster); writes announce
themselves on ``EVENTS_CHANNEL`` as the services do. Never imports Django, never decides
permissions or audits (the dashboard wraps the writes).

Whatever someone else wrote into these keys never crashes a reader, and is never taken
for more than it is: a pause that cannot be read (not JSON, not an object, JSON past
``queue_core.bounded_json``'s bounds, a key of another type) still pauses, shown as
``(unreadable)``, because something is there and guessing "not paused" would run jobs
an operator meant to stop; a heartbeat that cannot be read is skipped (a worker that
writes it is not a worker we can talk to).

Costs: ``pause_read`` is one GET, ``pause_set`` one SET (+ one PUBLISH), ``pause_clear``
one GETDEL (+ one PUBLISH), ``heartbeats_read`` one HGETALL, O(workers);
``heartbeat_send`` one pipelined round trip (GET, HSET, PEXPIRE; an HGETALL when it
prunes, plus an HDEL when something is that old).
"""

from __future__ import annotations

import functools
import json
import logging
import tomllib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, TypeGuard

import redis

from queue_core.bounded_json import json_read
from queue_core.connection import Client
from queue_core.errors import wrong_type
from queue_core.events import event_publish
from queue_core.keys import stream_keys
from queue_core.services import OWN_CONSUMERS
from queue_core.types import ConsumerInfo
from queue_core.validation import name_check, reason_check

log = logging.getLogger("queue_core.control")

#: How often a worker writes its heartbeat (WorkerConfig.heartbeat_ms defaults to this).
HEARTBEAT_INTERVAL_MS = 2000
#: A heartbeat is live while ``now_ms - seen_ms <= HEARTBEAT_STALE_MS`` (five missed
#: beats), else stale: the worker is gone, hung, or cut off from Redis. A heartbeat
#: with ``stopped_ms`` is never live (its worker stopped cleanly and said so).
HEARTBEAT_STALE_MS = 10_000
#: Each heartbeat renews the hash's TTL to this; workers prune fields this old.
HEARTBEAT_KEEP_MS = 3_600_000
#: How often a worker prunes fields older than HEARTBEAT_KEEP_MS (piggybacked on a beat).
HEARTBEAT_PRUNE_EVERY_MS = 30_000

#: What a pause nobody can read shows for its author and reason.
UNKNOWN_BY = "(unknown)"
UNREADABLE = "(unreadable)"


@dataclass(frozen=True, slots=True)
class Pause:
    """A group's pause: who, why, since when (epoch ms), and when it ends by itself."""

    by: str
    reason: str
    at_ms: int
    until_ms: int | None

    def active(self, now_ms: int) -> bool:
        """Whether it still holds at ``now_ms``: no auto-resume time, or not reached yet.

        Redis drops the key at ``until_ms`` (PXAT); workers compare too, so a key that was
        written without PXAT, or a clock a little ahead of Redis's, resumes on time."""
        return self.until_ms is None or now_ms < self.until_ms

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: bytes | str | None) -> Pause:
        """The pause in ``raw``; what cannot be read is kept as ``(unknown)``/``(unreadable)``
        field by field (a pause whose JSON is not an object is unreadable as a whole)."""
        data = _json_object(raw)
        if data is None:
            return UNREADABLE_PAUSE
        by, reason = data.get("by"), data.get("reason")
        at_ms, until_ms = data.get("at_ms"), data.get("until_ms")
        return cls(
            by=by if isinstance(by, str) and by else UNKNOWN_BY,
            reason=reason if isinstance(reason, str) else UNREADABLE,
            at_ms=at_ms if _is_int(at_ms) else 0,
            until_ms=until_ms if _is_int(until_ms) else None,
        )


#: A pause key whose content is not a JSON object (or a key of another type).
UNREADABLE_PAUSE = Pause(by=UNKNOWN_BY, reason=UNREADABLE, at_ms=0, until_ms=None)

_HEARTBEAT_INTS = (
    "pid", "concurrency", "running", "buffered", "processed", "failed", "started_ms", "seen_ms",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One Ackboard worker's last heartbeat, as it wrote it (times are epoch ms).

    ``running`` handlers now, ``buffered`` entries read and not started; ``processed``
    handler calls that returned and ``failed`` ones that raised, since ``started_ms``;
    ``paused`` true once the worker has seen the pause whose ``at_ms`` is ``pause_at_ms``
    and has no read or reclaim sweep in flight (it only finishes what it holds);
    ``stopped_ms`` set (to ``seen_ms``) by the last heartbeat of a worker that stopped,
    absent from a running worker's JSON and from every heartbeat of workers older than
    the field, which read as None: those are judged by ``seen_ms`` alone.
    """

    consumer: str
    host: str
    pid: int
    version: str
    concurrency: int
    running: int
    buffered: int
    processed: int
    failed: int
    started_ms: int
    seen_ms: int
    paused: bool
    pause_at_ms: int | None
    stopped_ms: int | None = None

    @property
    def stopped(self) -> bool:
        """Its worker said it stopped (its last heartbeat): not live, whatever its age."""
        return self.stopped_ms is not None

    def live(self, now_ms: int) -> bool:
        """Written within HEARTBEAT_STALE_MS of ``now_ms`` by a worker that has not said it
        stopped; else not live (stale or stopped: greyed out)."""
        return self.stopped_ms is None and now_ms - self.seen_ms <= HEARTBEAT_STALE_MS

    def confirms(self, pause: Pause) -> bool:
        """Whether this heartbeat confirms ``pause`` (not an earlier one)."""
        return self.paused and self.pause_at_ms == pause.at_ms

    def to_json(self) -> str:
        """Its JSON; ``stopped_ms`` only when set (a running worker's heartbeat is what it
        was before the field)."""
        data = asdict(self)
        if data["stopped_ms"] is None:
            del data["stopped_ms"]
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, consumer: str, raw: bytes | str) -> Heartbeat | None:
        """The heartbeat in ``raw`` under field ``consumer`` (the field is the name that
        counts); None when any field is missing or of the wrong type (``stopped_ms`` may
        be missing or null: not stopped)."""
        data = _json_object(raw)
        if data is None:
            return None
        ints = [data.get(name) for name in _HEARTBEAT_INTS]
        numbers = [value for value in ints if _is_int(value)]
        host, version = data.get("host"), data.get("version")
        paused, pause_at_ms = data.get("paused"), data.get("pause_at_ms")
        stopped_ms = data.get("stopped_ms")
        if (
            len(numbers) != len(ints)
            or not isinstance(host, str)
            or not isinstance(version, str)
            or not isinstance(paused, bool)
            or not (pause_at_ms is None or _is_int(pause_at_ms))
            or not (stopped_ms is None or _is_int(stopped_ms))
        ):
            return None
        pid, concurrency, running, buffered, processed, failed, started_ms, seen_ms = numbers
        return cls(
            consumer=consumer, host=host, pid=pid, version=version, concurrency=concurrency,
            running=running, buffered=buffered, processed=processed, failed=failed,
            started_ms=started_ms, seen_ms=seen_ms, paused=paused, pause_at_ms=pause_at_ms,
            stopped_ms=stopped_ms,
        )  # fmt: skip


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_object(raw: bytes | str | None) -> dict[str, Any] | None:
    """The JSON object in ``raw``; None for anything else (not JSON, not an object, nested
    too deep, too long, not bytes or text at all)."""
    if not isinstance(raw, str | bytes):
        return None
    try:
        data = json_read(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


# --- the pause ------------------------------------------------------------------------


def pause_read(
    *, client: Client, stream: str, group: str, now_ms: int | None = None
) -> Pause | None:
    """The group's pause, or None when it is not paused. One GET.

    With ``now_ms``, a pause whose ``until_ms`` has passed reads as None (Redis drops the
    key at that time by itself; this covers a key written without PXAT). A key of another
    type, or JSON that cannot be read, is ``UNREADABLE_PAUSE`` (still a pause).
    """
    key = stream_keys(stream).pause(group)
    try:
        raw = client.get(key)
    except redis.ResponseError as exc:
        if not wrong_type(exc):
            raise
        return UNREADABLE_PAUSE
    return _pause_of(raw, now_ms)


def _pause_of(raw: Any, now_ms: int | None) -> Pause | None:
    if raw is None:
        return None
    pause = Pause.from_json(raw)
    if now_ms is not None and not pause.active(now_ms):
        return None
    return pause


def pause_set(
    *,
    client: Client,
    stream: str,
    group: str,
    by: str,
    reason: str,
    until_ms: int | None,
    now_ms: int,
) -> Pause:
    """Pause ``group``: Ackboard workers stop reading and sweeping within a second, finish
    what they hold and confirm in their heartbeat. Returns the pause written.

    Pausing a paused group replaces its pause (new author, reason and ``at_ms``: workers
    confirm the new one). ``until_ms`` (epoch ms, after ``now_ms``) resumes it by itself:
    the key is set with PXAT. A reason is required. Raises ValueError on bad input. One
    SET and one PUBLISH.
    """
    name_check(stream, "stream")
    name_check(group, "group")
    name_check(by, "by")
    reason = reason_check(reason, required=True)
    if not _is_int(now_ms) or now_ms < 0:
        raise ValueError("now_ms must be a whole number of ms since the epoch")
    if until_ms is not None and (not _is_int(until_ms) or until_ms <= now_ms):
        raise ValueError("the auto-resume time must be in the future")
    pause = Pause(by=by, reason=reason, at_ms=now_ms, until_ms=until_ms)
    key = stream_keys(stream).pause(group)
    client.set(key, pause.to_json(), pxat=until_ms)
    event_publish(client=client, type="action", stream=stream, group=group, action="pause",
                  ids=[])  # fmt: skip
    return pause


def pause_clear(*, client: Client, stream: str, group: str) -> Pause | None:
    """Resume ``group``: delete its pause. Returns the pause removed (None when the group
    was not paused, which is not an error: resuming twice is harmless). Workers start
    reading again within a second. One GETDEL (a DEL for a key of another type) and one
    PUBLISH when something was removed.
    """
    name_check(stream, "stream")
    name_check(group, "group")
    key = stream_keys(stream).pause(group)
    try:
        removed = _pause_of(client.getdel(key), None)
    except redis.ResponseError as exc:
        if not wrong_type(exc):
            raise
        client.delete(key)
        removed = UNREADABLE_PAUSE
    if removed is not None:
        event_publish(client=client, type="action", stream=stream, group=group,
                      action="resume", ids=[])  # fmt: skip
    return removed


# --- heartbeats -----------------------------------------------------------------------


def heartbeats_read(*, client: Client, stream: str, group: str) -> list[Heartbeat]:
    """The group's worker heartbeats, sorted by consumer, live and stale alike (see
    ``Heartbeat.live``). Unreadable ones are skipped; a key of another type reads as
    none. One HGETALL, O(workers)."""
    key = stream_keys(stream).workers(group)
    try:
        raw = client.hgetall(key)
    except redis.ResponseError as exc:
        if not wrong_type(exc):
            raise
        log.warning("%s is not a hash; no heartbeats can be read from it", key)
        return []
    return _heartbeats_of(raw)


def _heartbeats_of(raw: dict[Any, Any]) -> list[Heartbeat]:
    beats = []
    for field, value in raw.items():
        consumer = field.decode(errors="replace") if isinstance(field, bytes) else str(field)
        beat = Heartbeat.from_json(consumer, value)
        if beat is not None:
            beats.append(beat)
    beats.sort(key=lambda beat: beat.consumer)
    return beats


def heartbeat_send(
    *,
    client: Client,
    stream: str,
    group: str,
    beat: Heartbeat,
    prune_before_ms: int | None = None,
) -> Pause | None:
    """A worker's heartbeat: HSET its field and renew the hash's TTL (PEXPIRE 1 h), and
    read the group's pause, in one pipelined round trip. Returns the pause (as
    ``pause_read``, without the ``until_ms`` check: the worker compares itself).

    With ``prune_before_ms``, the same pipeline reads the hash and the fields of other
    workers whose ``seen_ms`` is before it are deleted with one more HDEL (a worker gone
    for an hour; what cannot be read is left alone). A field refreshed between the read
    and the HDEL is lost until its worker's next beat, 2 s later: harmless.

    Raises what the pipeline raised (the caller logs and tries again on its next tick).
    """
    keys = stream_keys(stream)
    pause_key, workers_key = keys.pause(group), keys.workers(group)
    pipe = client.pipeline(transaction=False)
    pipe.get(pause_key)
    pipe.hset(workers_key, beat.consumer, beat.to_json())
    pipe.pexpire(workers_key, HEARTBEAT_KEEP_MS)
    if prune_before_ms is not None:
        pipe.hgetall(workers_key)
    replies = pipe.execute(raise_on_error=False)
    for reply in replies[1:]:
        if isinstance(reply, Exception):
            raise reply
    pause = _pause_reply(replies[0])
    if prune_before_ms is not None:
        old = [
            other.consumer
            for other in _heartbeats_of(replies[3])
            if other.seen_ms < prune_before_ms and other.consumer != beat.consumer
        ]
        if old:
            client.hdel(workers_key, *old)
            log.info("pruned %d heartbeats of %s group %s not seen for an hour: %s",
                     len(old), stream, group, ", ".join(old))  # fmt: skip
    return pause


def _pause_reply(reply: Any) -> Pause | None:
    if isinstance(reply, redis.ResponseError) and wrong_type(reply):
        return UNREADABLE_PAUSE
    if isinstance(reply, Exception):
        raise reply
    return _pause_of(reply, None)


@functools.cache
def ackboard_version() -> str:
    """Ackboard's version: the installed distribution's, else the ``pyproject.toml`` of the
    checkout this package runs from (``uv run`` does not install the project), else
    ``"unknown"``. Read once per process."""
    try:
        return metadata.version("ackboard")
    except metadata.PackageNotFoundError:
        pass
    try:
        with (Path(__file__).resolve().parents[1] / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f).get("project", {})
    except (OSError, ValueError):
        return "unknown"
    version = project.get("version") if project.get("name") == "ackboard" else None
    return version if isinstance(version, str) else "unknown"


# --- what it adds up to ---------------------------------------------------------------


@dataclass(frozen=True)
class FleetState:
    """A group's pause and workers at one moment (built by ``fleet_state``)."""

    #: The pause in force (None: not paused, or its auto-resume time has passed).
    pause: Pause | None
    #: Every heartbeat, sorted by consumer; stale and stopped ones included (greyed out).
    workers: tuple[Heartbeat, ...]
    #: The workers with a live heartbeat (never one that said it stopped).
    live: tuple[Heartbeat, ...]
    #: Live workers that confirm THIS pause (0 when not paused).
    confirmed: int
    #: Jobs running or buffered on live workers while paused (0 when not paused).
    finishing: int
    #: Consumers seen recently (XINFO CONSUMERS idle within ``seen_within_ms``) with no
    #: live heartbeat: they are not Ackboard workers (or their heartbeat fails), so a
    #: pause cannot stop them. A worker whose last heartbeat says it stopped is not one
    #: of them (it read until it stopped, and reads no more). Sorted.
    not_pausable: tuple[str, ...]

    @property
    def paused(self) -> bool:
        return self.pause is not None

    @property
    def all_confirmed(self) -> bool:
        """Paused, and every live worker confirmed it (vacuously true with none)."""
        return self.pause is not None and self.confirmed == len(self.live)


def fleet_state(
    *,
    pause: Pause | None,
    heartbeats: Sequence[Heartbeat],
    consumers: Sequence[ConsumerInfo],
    now_ms: int,
    seen_within_ms: int,
) -> FleetState:
    """What the pause, the heartbeats and XINFO CONSUMERS add up to at ``now_ms``. Pure;
    O(workers + consumers).

    ``seen_within_ms`` is how recently a consumer must have tried to read (XINFO's
    ``idle``) to count as running: the dashboard passes its stuck threshold. Operator
    claims and the retire parking place (``services.OWN_CONSUMERS``) are not workers and
    never count, nor does a consumer whose heartbeat says its worker stopped (a worker
    started again under that name writes a new heartbeat before it reads).
    """
    if pause is not None and not pause.active(now_ms):
        pause = None
    workers = tuple(sorted(heartbeats, key=lambda beat: beat.consumer))
    live = tuple(beat for beat in workers if beat.live(now_ms))
    if pause is None:
        confirmed = finishing = 0
    else:
        confirmed = sum(1 for beat in live if beat.confirms(pause))
        finishing = sum(beat.running + beat.buffered for beat in live)
    beating = {beat.consumer for beat in live}
    stopped = {beat.consumer for beat in workers if beat.stopped}
    not_pausable = tuple(
        sorted(
            info.name
            for info in consumers
            if info.idle_ms <= seen_within_ms
            and info.name not in beating
            and info.name not in stopped
            and info.name not in OWN_CONSUMERS
        )
    )
    return FleetState(
        pause=pause, workers=workers, live=live, confirmed=confirmed, finishing=finishing,
        not_pausable=not_pausable,
    )  # fmt: skip
