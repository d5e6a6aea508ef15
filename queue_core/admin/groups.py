"""Create and delete a consumer group: ``group_create`` (at a position, with ENTRIESREAD
when it is known, so the lag is right from the start) and ``group_delete`` (guarded
against pending entries and running workers).

Each is one script run (``group_create.lua``, ``group_delete.lua``) that checks before
it acts, every key in the stream's slot. A refused guard raises ``Refused``; a change
publishes an ``action`` event. Never imports Django, never decides permissions or writes
audit rows (the dashboard does).
"""

from __future__ import annotations

from dataclasses import dataclass

from queue_core.admin.positions import Position
from queue_core.admin.reads import entries_read_at
from queue_core.admin.shared import Refused, action_publish, now_or_clock
from queue_core.connection import Client
from queue_core.control import HEARTBEAT_STALE_MS
from queue_core.keys import stream_keys
from queue_core.scripts.binding import Refusal
from queue_core.scripts.group_create import GROUP_CREATE
from queue_core.scripts.group_delete import GROUP_DELETE
from queue_core.validation import count_check, entry_id_check, name_check


@dataclass(frozen=True, slots=True)
class GroupCreated:
    """The new group: its last-delivered id and entries-read as XINFO GROUPS reports them
    (None on Redis 6.2, or when the count was not known), and its lag (None: unknown)."""

    last_id: str
    entries_read: int | None
    lag: int | None = None


def group_create(
    *,
    client: Client,
    stream: str,
    group: str,
    position: Position,
    mkstream: bool = False,
) -> GroupCreated:
    """XGROUP CREATE at ``position`` with ENTRIESREAD when the count of entries up to it is
    known (see ``entries_read_at``), so the lag is right from the start.

    Refused: the group exists, the stream does not (and not ``mkstream``), the key is not a
    stream. At the start or the end one script run; at an id or a time also up to two
    bounded XRANGE walks (``COUNT_BUDGET``).
    """
    name_check(stream, "stream")
    name_check(group, "group")
    entry_id_check(position.id if position.mode == "id" else "0-0", what="position")
    read, seen_deleted = None, ""
    if position.mode == "id":
        read, seen_deleted = entries_read_at(client, stream, position.id)
    reply = GROUP_CREATE.call(
        stream=stream,
        group=group,
        mode=position.mode,
        entry_id=position.id,
        entries_read=read,
        seen_max_deleted=seen_deleted,
        mkstream=mkstream,
    ).run(client)
    if isinstance(reply, Refusal):
        raise Refused(
            {
                "exists": f"there is already a consumer group {group!r} on stream {stream!r}",
                "no-stream": f"there is no stream {stream!r} (create it with the group to "
                "start an empty one)",
                "wrong-type": f"{stream!r} is not a stream",
            }.get(reply.kind, reply.kind)
        )
    action_publish(client, action="create-group", stream=stream, group=group)
    return GroupCreated(reply.last_id, reply.entries_read, reply.lag)


@dataclass(frozen=True, slots=True)
class GroupDeleted:
    """How many pending entries were dropped with the group (0 when none were pending)."""

    pending_dropped: int


def group_delete(
    *,
    client: Client,
    stream: str,
    group: str,
    expected_pending: int,
    acknowledge: bool,
    now_ms: int | None = None,
) -> GroupDeleted:
    """XGROUP DESTROY, with the group's pause and heartbeat keys. Refused while entries
    are pending unless ``acknowledge`` and the pending count is still
    ``expected_pending`` (what the operator saw), checked in the same script run. Refused
    too while an Ackboard worker of the group has a live heartbeat: on NOGROUP a worker
    creates its group again, which would undo the delete (stop the workers first). One
    round trip; O(groups + workers) to check, O(pending + consumers) for Redis to free."""
    name_check(stream, "stream")
    name_check(group, "group")
    count_check(expected_pending, "expected_pending")
    keys = stream_keys(stream)
    reply = GROUP_DELETE.call(
        stream=stream,
        pause_key=keys.pause(group),
        workers_key=keys.workers(group),
        group=group,
        expected_pending=expected_pending,
        acknowledge=acknowledge,
        now_ms=now_or_clock(now_ms),
        stale_ms=HEARTBEAT_STALE_MS,
    ).run(client)
    if isinstance(reply, Refusal):
        raise _delete_refused(reply, stream, group, expected_pending)
    action_publish(client, action="delete-group", stream=stream, group=group)
    return GroupDeleted(reply)


def _delete_refused(reply: Refusal, stream: str, group: str, expected_pending: int) -> Refused:
    """The operator's message for a refusal of ``group_delete.lua``."""
    if reply.kind == "pending":
        return Refused(
            f"{reply.message} entries are pending in {group!r}: acknowledge dropping "
            "them (with a reason) to delete the group"
        )
    if reply.kind == "live-workers":
        return Refused(
            f"{group!r} has running workers ({reply.message}): "
            "stop them first, or they create the group again"
        )
    if reply.kind == "pending-changed":
        return Refused(
            f"changed since you looked: {reply.message} entries are pending in "
            f"{group!r} now, not {expected_pending}"
        )
    return Refused(f"there is no consumer group {group!r} on stream {stream!r}")
