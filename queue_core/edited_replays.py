"""Edited replays: replay a dead letter with edited fields, keep it until that succeeds.

Owns the write (``dead_letter_edit_replay``: one Lua script, ``scripts/edit_replay.lua``)
that XADDs the edited fields to the origin stream for the origin group only
(``ackboard.replay-group``, ``ackboard.replay-of`` = the origin id as a plain replay,
``ackboard.edited=1`` and ``ackboard.edited-from`` = the dead letter's id) and records
the dead letter as "replayed as <new id>, awaiting success" in a companion hash in the
stream's slot (``{S}:dlq-edits``, dead-letter id -> JSON). The dead letter itself is not
touched: the original is never lost. ``edited_replays_settle`` later deletes it once the
new entry was acknowledged by its group (delivered to it and no longer pending, and not
dead-lettered again), or marks the record "failed" when the new entry was dead-lettered
again (the operator may then edit again without forcing). A second edited replay of a
dead letter whose first one still awaits success is refused unless forced.

It never imports Django and never decides permissions or audits (the dashboard does);
it publishes an ``action`` event after a replay, as the services do.

Cost: a replay is one round trip, O(fields + groups) in Redis. ``edited_replays_settle``
is one HGETALL of the stream's records (only dead letters with an edited replay not yet
settled: a handful), one pipelined round trip (XINFO GROUPS, and per awaiting record an
``XPENDING key group id id 1`` and an ``XRANGE dlq id id``), one more for the records
that look settled (``XRANGE dlq (new_id + COUNT 500``, looking for a new dead letter of
the new entry), then one script per record that changes. It runs in a sweep, never
on a page read: ``edited_replays_sweep`` settles every
stream with an edited replay (from the ``DLQ_EDITS_INDEX_KEY`` set) and
``edited_replays_sweeper`` runs it every few seconds in ``manage.py run_jobs``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from queue_core.bounded_json import json_read
from queue_core.connection import Client
from queue_core.events import event_publish
from queue_core.keys import DLQ_EDITS_INDEX_KEY, ORIGIN_ID_FIELD, stream_keys
from queue_core.scripts.binding import Refusal
from queue_core.scripts.edit_replay import (
    EDIT_REPLAY,
    EDIT_REPLAY_SETTLE,
    EDITED_FIELD,
    EDITED_FROM_FIELD,
    EditReplayed,
)
from queue_core.validation import entry_id_check, entry_id_key

__all__ = [
    "EDITED_FIELD",
    "EDITED_FROM_FIELD",
    "EditReplayed",
    "EditedReplay",
    "dead_letter_edit_replay",
    "edited_replays_read",
    "edited_replays_settle",
    "edited_replays_sweep",
    "edited_replays_sweeper",
]

log = logging.getLogger("ackboard.edited_replays")

#: The streams that may have edited replays to settle: a set of stream names, added to
#: after each edited replay and pruned by the sweep once a stream has none left. Outside
#: the streams' slots (one key for all), so it is written apart from the replay's script:
#: a lost entry (a crash between the two, or a prune racing a new replay) only means that
#: stream is settled by its dead-letter page's reads until its next edited replay.
#: Streams one sweep looks at, at most.
SWEEP_MAX_STREAMS = 1000

#: How many dead letters after a replay's new entry the settle looks through for a new
#: dead letter of it (a failed replay is dead-lettered after its own id).
FAILED_AGAIN_SCAN = 500
_ORIGIN_ID = ORIGIN_ID_FIELD.encode()


@dataclass(frozen=True, slots=True)
class EditedReplay:
    """The record of a dead letter's latest edited replay."""

    dlq_id: str
    new_id: str
    group: str
    #: "awaiting" (not acknowledged by its group yet) or "failed" (dead-lettered again).
    state: str
    at_ms: int
    operator: str
    #: For "failed": the new dead letter's id ("" when unknown).
    failed_as: str = ""


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _record(dlq_id: str, raw: Any) -> EditedReplay | None:
    try:
        data = json_read(raw)
        return EditedReplay(
            dlq_id=dlq_id,
            new_id=str(data["new_id"]),
            group=str(data["group"]),
            state=str(data["state"]),
            at_ms=int(data.get("at_ms") or 0),
            operator=str(data.get("operator") or ""),
            failed_as=str(data.get("failed_as") or ""),
        )
    except (ValueError, KeyError, TypeError, OverflowError):
        # Not JSON, past the reader's bounds, not an object, or a number int() refuses
        # (Infinity): what someone else wrote is skipped, never raised.
        return None


def dead_letter_edit_replay(
    *,
    client: Client,
    stream: str,
    dlq_id: str,
    fields: Sequence[tuple[bytes, bytes]],
    operator: str,
    force: bool = False,
) -> EditReplayed:
    """Replay dead letter ``dlq_id`` of ``stream`` with ``fields`` instead of its own.

    Raises ActionRefused (not found, no origin, no field, a reserved ``ackboard.*``
    name, an earlier edited replay awaiting success unless ``force``, origin group gone,
    too many fields) with nothing changed; ValueError for a malformed id.
    """
    entry_id_check(dlq_id, what="dead-letter id")
    result = EDIT_REPLAY.call(
        stream=stream, dlq_id=dlq_id, fields=fields, force=force, operator=operator
    ).run(client)
    if isinstance(result, Refusal):
        raise result.error()
    try:
        client.sadd(DLQ_EDITS_INDEX_KEY, stream)
    except redis.RedisError:
        log.warning("edited replay of %s: not added to the sweep's index", dlq_id)
    event_publish(
        client=client,
        type="action",
        stream=stream,
        group=result.group,
        action="edit-replay",
        ids=[result.new_id],
    )
    return result


def edited_replays_read(
    *, client: Client, stream: str, dlq_ids: Sequence[str]
) -> dict[str, EditedReplay]:
    """The records of ``dlq_ids`` that have one: one HMGET, O(ids)."""
    if not dlq_ids:
        return {}
    raw = client.hmget(stream_keys(stream).dlq_edits, list(dlq_ids))
    found = {}
    for dlq_id, value in zip(dlq_ids, raw, strict=True):
        record = _record(dlq_id, value) if value is not None else None
        if record is not None:
            found[dlq_id] = record
    return found


def _failed_again(client: Client, dlq: str, new_ids: Sequence[str]) -> dict[str, str]:
    """new id -> the dead letter it became, for those found among the dead letters added
    after it (``FAILED_AGAIN_SCAN`` of them at most, one pipelined round trip)."""
    pipe = client.pipeline(transaction=False)
    for new_id in new_ids:
        pipe.xrange(dlq, min="(" + new_id, max="+", count=FAILED_AGAIN_SCAN)
    found: dict[str, str] = {}
    for new_id, items in zip(new_ids, pipe.execute(raise_on_error=False), strict=True):
        if not isinstance(items, list):
            continue
        for entry_id, fields in items:
            if (fields or {}).get(_ORIGIN_ID) == new_id.encode():
                found[new_id] = _text(entry_id)
                break
    return found


def edited_replays_settle(client: Client, stream: str) -> int:
    """Settle ``stream``'s edited replays; returns how many records changed.

    A record awaiting success is settled "ok" (the dead letter deleted with its record)
    when its group has had the new entry delivered (its last-delivered id is at or past
    it) and no longer holds it pending, and it was not dead-lettered again; "failed"
    when it was dead-lettered again. A record whose dead letter is gone (deleted by an
    operator) is dropped. Each change is one atomic script that checks the record still
    names the same new entry. Safe to run from several processes at once.
    """
    keys = stream_keys(stream)
    key = stream_keys(stream).dlq_edits
    raw = client.hgetall(key)
    if not raw:
        return 0
    records = [r for k, v in raw.items() if (r := _record(_text(k), v)) is not None]
    pipe = client.pipeline(transaction=False)
    pipe.xinfo_groups(stream)
    for r in records:
        pipe.xrange(keys.dlq, min=r.dlq_id, max=r.dlq_id, count=1)
        pipe.xpending_range(stream, r.group, min=r.new_id, max=r.new_id, count=1)
    replies = pipe.execute(raise_on_error=False)
    groups_raw = replies[0]
    delivered: dict[str, str] = {}
    if isinstance(groups_raw, list):
        for g in groups_raw:
            delivered[_text(g.get("name"))] = _text(g.get("last-delivered-id") or "0-0")
    changes: list[tuple[EditedReplay, str]] = []
    looks_done: list[EditedReplay] = []
    for i, r in enumerate(records):
        in_dlq, pending = replies[1 + 2 * i], replies[2 + 2 * i]
        if isinstance(in_dlq, list) and not in_dlq:
            changes.append((r, "gone"))
            continue
        if r.state != "awaiting" or isinstance(pending, Exception) or pending:
            continue
        last = delivered.get(r.group)
        if last is None or entry_id_key(last) < entry_id_key(r.new_id):
            continue  # not delivered yet (or the group is gone: the operator decides)
        looks_done.append(r)
    failed = _failed_again(client, keys.dlq, [r.new_id for r in looks_done]) if looks_done else {}
    changed = 0
    for r in looks_done:
        changes.append((r, "failed" if r.new_id in failed else "ok"))
    for r, outcome in changes:
        try:
            done = EDIT_REPLAY_SETTLE.call(
                stream=stream,
                dlq_id=r.dlq_id,
                new_id=r.new_id,
                outcome=outcome,
                failed_as=failed.get(r.new_id, ""),
            ).run(client)
        except redis.ResponseError:
            continue
        changed += int(done)
    return changed


def edited_replays_sweep(client: Client, *, max_streams: int = SWEEP_MAX_STREAMS) -> int:
    """Settle every stream of the sweep's index (``DLQ_EDITS_INDEX_KEY``); returns how many
    records changed. A stream left with no record is pruned from the index. One SSCAN
    page, then per stream what ``edited_replays_settle`` costs plus one EXISTS."""
    changed = 0
    _, members = client.sscan(DLQ_EDITS_INDEX_KEY, 0, count=max_streams)
    for raw in list(members)[:max_streams]:
        stream = _text(raw)
        try:
            changed += edited_replays_settle(client, stream)
            if not client.exists(stream_keys(stream).dlq_edits):
                client.srem(DLQ_EDITS_INDEX_KEY, raw)
        except (redis.ResponseError, ValueError):  # a name that cannot have companions
            client.srem(DLQ_EDITS_INDEX_KEY, raw)
    return changed


def edited_replays_sweeper(
    client_factory: Callable[[], Client], stopping: threading.Event, *, every_s: float = 5.0
) -> None:
    """Run ``edited_replays_sweep`` every ``every_s`` seconds until ``stopping`` is set
    (``manage.py run_jobs`` runs it in a daemon thread). A Redis error is logged and the
    next sweep tries again; any other error too (a bug, or something hostile in a key
    that no reader expected), with its traceback once until a sweep succeeds again, so a
    failure that repeats every sweep cannot flood the log or end the thread."""
    traced = False
    while not stopping.is_set():
        try:
            changed = edited_replays_sweep(client_factory())
            if changed:
                log.info("edited replays: %d settled or updated", changed)
            traced = False
        except redis.RedisError as exc:
            log.warning("edited replays sweep failed: %s", exc)
        except Exception as exc:
            if not traced:
                log.exception("edited replays sweep failed; retrying every %.0f s", every_s)
                traced = True
            else:
                log.debug("edited replays sweep failed again: %s", exc)
        stopping.wait(every_s)
