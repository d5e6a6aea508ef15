"""Group administration: Create group, Delete group, Reset position, Trim.

Owns four rows of the action table (``ROWS``, merged into
``dashboard.views.actions.ACTIONS``: a permission, a form from ``dashboard.views.admin_forms``,
the state before, one ``queue_core.admin`` call and its message each), the words and
reads they share with the dry runs of Reset position and Trim
(``dashboard.views.admin_dry_runs``), and the group page's Undo. The confirmed actions go
through the table's own routes (``dashboard:group-action``, ``dashboard:stream-action``)
and runner: one AuditEvent row per attempt.

A reset's audit row keeps the position before (``before_id``, ``before_entries_read``)
and how to undo it (a reset back to that id): ``last_reset`` reads it for the group
page's Undo, which opens the dry run of that reset.

It never writes to Redis itself (``queue_core.admin`` does, atomically, and publishes
the change on the events channel so open pages update) and reads it only through
``queue_core.admin``'s previews and ``queue_core.selectors``. Costs: a confirmed trim
reads its preview for the audit row (XINFO, a walk of at most ``admin.COUNT_BUDGET``
entries; a reset's service previews by itself). Delete group answers with a redirect to
the stream's page (``ActionResult.redirect``): its own is gone.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Field
from django.urls import NoReverseMatch, reverse

from dashboard.models import AuditEvent
from dashboard.runtime.connection import get_redis
from dashboard.views.action_cli import GROUP, STREAM, Arg, Cli, Options, reason, yes
from dashboard.views.action_runner import ActionResult, BadRequest
from dashboard.views.action_table import Action, Call, Remote
from dashboard.views.admin_forms import (
    CreateGroupForm,
    DeleteGroupForm,
    ResetPositionForm,
    TrimForm,
)
from dashboard.views.answer import Answer
from queue_core import admin, selectors

# --- words ----------------------------------------------------------------------------


def entries_words(n: int, exact: bool = True) -> str:
    """ "3 entries", "1 entry", or "more than 10000 entries" (a count cut at its budget)."""
    if not exact:
        return f"more than {n - 1} entries"
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def read_words(entries_read: int | None) -> str:
    return "" if entries_read is None else f" (entries read {entries_read})"


def _position_words(position: admin.Position) -> str:
    if position.kind == "start":
        return "the start (every entry in the stream is delivered)"
    if position.kind == "end":
        return "the end (only entries added from now on are delivered)"
    return f"id {position.id}" if position.kind == "id" else f"time {position.id} (UTC)"


def reset_effect(diff: admin.PositionDiff) -> str:
    """What a reset does to the entries between the two positions, in one phrase."""
    if diff.redeliver:
        return f"{entries_words(diff.redeliver, diff.exact)} would be delivered again"
    if diff.skip:
        return f"{entries_words(diff.skip, diff.exact)} would be skipped (never delivered)"
    return "no entry would be delivered again or skipped"


def reset_refusal(diff: admin.PositionDiff) -> str:
    """Why a confirm would be refused now ("" when it would not): live consumers on a
    group that is not paused (the guard ``admin.position_reset`` applies)."""
    if diff.live_consumers and not diff.paused:
        names = ", ".join(diff.live_consumers[:10])
        more = f" and {len(diff.live_consumers) - 10} more" if len(diff.live_consumers) > 10 else ""
        return (
            f"The group has live consumers ({names}{more}): pause it first; a reset is "
            "refused while they read."
        )
    return ""


def seen_within_ms() -> int:
    """Consumers without a heartbeat count as live when seen within this: the stuck
    threshold the health badges use (``ACKBOARD_STUCK_AFTER_MS``)."""
    return int(settings.ACKBOARD_STUCK_AFTER_MS)


# --- reads shared by the rows and the dry runs -----------------------------------------


def _group_exists(stream: str, group: str) -> None:
    """404 unless ``group`` is a consumer group of ``stream`` (one XPENDING summary)."""
    if selectors.pending_summary(client=get_redis(), stream=stream, group=group) is None:
        raise BadRequest(f"no consumer group {group!r} on stream {stream!r}", 404)


def _stream_exists(stream: str) -> None:
    """404 unless ``stream`` is a stream (XLEN and XINFO GROUPS, pipelined)."""
    if not selectors.stream_summaries(client=get_redis(), streams=[stream]):
        raise BadRequest(f"no stream {stream!r}", 404)


def reset_diff(stream: str, group: str, data: Mapping[str, Any]) -> admin.PositionDiff:
    _group_exists(stream, group)
    return admin.position_preview(
        client=get_redis(),
        stream=stream,
        group=group,
        position=data["parsed"],
        seen_within_ms=seen_within_ms(),
    )


def trim_plan(stream: str, data: Mapping[str, Any]) -> admin.TrimPlan:
    _stream_exists(stream)
    return admin.trim_preview(client=get_redis(), stream=stream, minid=data["minid"])


def plan_state(plan: admin.TrimPlan) -> dict[str, Any]:
    return {
        "minid": plan.minid,
        "would_delete": plan.would_delete,
        "exact": plan.exact,
        "floor_id": plan.floor_id,
        "floor_group": plan.floor_group,
        "floor_reason": plan.floor_reason,
        "past_floor": plan.past_floor,
    }


def diff_state(diff: admin.PositionDiff) -> dict[str, Any]:
    return {
        "before_id": diff.before_id,
        "before_entries_read": diff.before_entries_read,
        "after_id": diff.after_id,
        "after_entries_read": diff.after_entries_read,
        "redeliver": diff.redeliver,
        "skip": diff.skip,
        "exact": diff.exact,
        "live_consumers": list(diff.live_consumers),
        "paused": diff.paused,
    }


def trim_floor_words(plan: admin.TrimPlan) -> str:
    """Where the floor is and why, for a dry run and a refusal."""
    if not plan.floor_id:
        return "The stream has no consumer group, so no floor."
    why = (
        "its oldest pending entry"
        if plan.floor_reason == "pending"
        else "its first entry not delivered yet"
    )
    return f"The floor is {plan.floor_id}: group {plan.floor_group} ({why})."


# --- the rows ---------------------------------------------------------------------------


def _create_before(call: Call) -> dict[str, Any]:
    """The new group's name goes on the audit row; the stream must exist (404)."""
    name = call.data.get("name")
    if isinstance(name, str):
        call.req.group = name[:1024]
    _stream_exists(call.req.stream)
    return {"position": call.data.get("position", ""), "at": call.data.get("at", "")}


def _create_group(call: Call) -> ActionResult:
    position: admin.Position = call.data["parsed"]
    name: str = call.data["name"]
    created = admin.group_create(
        client=call.client, stream=call.req.stream, group=name, position=position
    )
    lag = "" if created.lag is None else f", lag {created.lag}"
    return ActionResult(
        "ok",
        f"Group {name} created on {call.req.stream} at {_position_words(position)}: last "
        f"delivered id {created.last_id}{lag}.",
        reported={
            "created_last_id": created.last_id,
            "created_entries_read": created.entries_read,
            "position_id": position.id,
        },
    )


def _delete_group(call: Call) -> ActionResult:
    group = call.req.group
    deleted = admin.group_delete(
        client=call.client,
        stream=call.req.stream,
        group=group,
        expected_pending=call.data["expected_pending"] or 0,
        acknowledge=bool(call.data["acknowledge"]),
    )
    dropped = deleted.pending_dropped
    tail = (
        f"; {entries_words(dropped)} pending in it were dropped, as acknowledged" if dropped else ""
    )
    try:  # the group's page is gone: the answer goes to the stream's
        redirect = reverse("dashboard:stream-detail", args=[call.req.stream])
    except NoReverseMatch:
        redirect = ""
    return ActionResult(
        "ok",
        f"Group {group} deleted from {call.req.stream}{tail}.",
        reported={"pending_dropped": dropped},
        redirect=redirect,
    )


def _reset_position(call: Call) -> ActionResult:
    data = call.data
    if not data["confirm"] or not data["expected_before_id"]:
        raise BadRequest(
            "A reset needs its dry run first: confirm it with the position the dry run "
            "showed (expected_before_id)."
        )
    diff = admin.position_reset(
        client=call.client,
        stream=call.req.stream,
        group=call.req.group,
        position=data["parsed"],
        expected_before_id=data["expected_before_id"],
        seen_within_ms=seen_within_ms(),
    )
    moved = (
        f"{entries_words(diff.redeliver, diff.exact)} will be delivered again"
        if diff.redeliver
        else f"{entries_words(diff.skip, diff.exact)} were skipped"
        if diff.skip
        else "no entry was delivered again or skipped"
    )
    return ActionResult(
        "ok",
        f"Position of {call.req.group} reset from {diff.before_id}"
        f"{read_words(diff.before_entries_read)} to {diff.after_id}"
        f"{read_words(diff.after_entries_read)}: {moved}. To undo, reset it to {diff.before_id}.",
        # The position before is the audit row's: the reset can be undone from it.
        reported={**diff_state(diff), "lag": diff.lag, "undo_position": diff.before_id},
    )


def _trim_before(call: Call) -> dict[str, Any]:
    """The dry run's figures at the time of the confirm, for the audit row."""
    if "minid" not in call.data:
        return {}
    return plan_state(trim_plan(call.req.stream, call.data))


def _trim(call: Call) -> ActionResult:
    data = call.data
    if not data["confirm"]:
        raise BadRequest("A trim needs its dry run first: confirm it (confirm=1).")
    trimmed = admin.stream_trim(
        client=call.client, stream=call.req.stream, minid=data["minid"], force=data["force"]
    )
    forced = " (forced past the floor)" if data["force"] else ""
    return ActionResult(
        "ok",
        f"Trimmed {entries_words(trimmed.deleted)} older than {data['minid']} from "
        f"{call.req.stream}{forced}.",
        reported={"deleted": trimmed.deleted, "force": bool(data["force"])},
    )


# --- their command lines ------------------------------------------------------------------

POSITION_HELP = (
    "start, end, an id (1700000000000-0), a time in UTC (2026-12-01T10:00:00Z) or a time "
    "before now (-15m)"
)


def _reset_hint(payload: Mapping[str, Any], options: Options) -> str:
    return (
        f" To act, run: reset-position {options['stream']} {options['group']} "
        f"{payload['position']} --yes --expected-before-id {payload['expected_before_id']}"
    )


def _trim_hint(payload: Mapping[str, Any], options: Options) -> str:
    force = " --force" if payload["past_floor"] else ""
    return f" To act, run: trim {options['stream']} {payload['minid']} --yes{force}"


def _acknowledged(n: str) -> Mapping[str, str]:
    """``--acknowledge N``: the count the operator acknowledges, ticked (none: 0)."""
    return {"expected_pending": n or "0", "acknowledge": "1" if n else ""}


_CREATE_CLI = Cli(
    "create a consumer group",
    (
        STREAM,
        Arg(("group",), {"help": "The new group's name."}, field="name"),
        Arg(
            ("--position",),
            {"default": "end", "help": f"Where it starts: {POSITION_HELP}."},
            field="position",
        ),
        reason("Audited."),
    ),
)
_DELETE_CLI = Cli(
    "delete a consumer group (refused while entries are pending unless acknowledged)",
    (
        STREAM,
        GROUP,
        Arg(
            ("--acknowledge",),
            {
                "default": "",
                "metavar": "N",
                "help": "Drop its N pending entries (N as you saw it; needs --reason).",
            },
            fields=_acknowledged,
        ),
        reason("Audited."),
    ),
    typed_name="group",
)
_RESET_CLI = Cli(
    "reset a group's position (dry run unless --yes)",
    (
        STREAM,
        GROUP,
        Arg(("position",), {"help": POSITION_HELP}, field="position"),
        yes("Reset, as the dry run showed it."),
        Arg(
            ("--expected-before-id",),
            {"default": "", "help": "The position before the dry run printed."},
            field="expected_before_id",
            on_yes=True,
        ),
        reason("Audited."),
    ),
    hint=_reset_hint,
)
_TRIM_CLI = Cli(
    "trim a stream to MINID (dry run unless --yes)",
    (
        STREAM,
        Arg(
            ("minid",),
            {"help": "Delete entries older than this id, or this time in UTC."},
            field="minid",
        ),
        yes("Trim, as the dry run showed it."),
        Arg(
            ("--force",),
            {"action": "store_true", "help": "Even past the floor (entries a group needs)."},
            field="force",
            tick=True,
            on_yes=True,
        ),
        reason("Audited."),
    ),
    typed_name="stream",
    hint=_trim_hint,
)


def _reset_dry_run(remote: Remote) -> Answer:
    """Reset position's dry run for a terminal or a script (``admin_dry_runs``, which
    imports this module's words: imported here, when called)."""
    from dashboard.views.admin_dry_runs import reset_answer

    return reset_answer(remote)


def _trim_dry_run(remote: Remote) -> Answer:
    """Trim's dry run for a terminal or a script (as ``_reset_dry_run``)."""
    from dashboard.views.admin_dry_runs import trim_answer

    return trim_answer(remote)


#: Administering a group (create, delete, reset its position) is one permission, and
#: trimming a stream another.
ROWS: tuple[Action, ...] = (
    Action(
        "create-group", "stream", CreateGroupForm, _create_group, before=_create_before,
        permission="dashboard.administer_group",
        explain=(
            "Create group makes a consumer group on this stream; its workers get the entries "
            "after the position chosen (the start: all of them; the end: only new ones)."
        ),
        cli=_CREATE_CLI,
    ),
    Action(
        "delete-group", "group", DeleteGroupForm, _delete_group,
        permission="dashboard.administer_group",
        explain=(
            "Delete group destroys {group}, its consumers and its pending entries (which are "
            "never run); the stream's entries and other groups are untouched. It cannot be "
            "undone."
        ),
        cli=_DELETE_CLI,
    ),
    Action(
        "reset-position", "group", ResetPositionForm, _reset_position,
        permission="dashboard.administer_group",
        explain=(
            "Reset position moves where {group} reads from: entries after it are delivered "
            "(again), entries before it are skipped. The audit row keeps the position before, "
            "to undo it."
        ),
        cli=_RESET_CLI,
        remote_dry_run=_reset_dry_run,
    ),
    Action(
        "trim", "stream", TrimForm, _trim, before=_trim_before,
        permission="dashboard.trim_stream",
        explain=(
            "Trim deletes the stream's entries older than the id or time given, for every "
            "group; never what a group still needs (pending or not delivered yet) unless "
            "forced."
        ),
        cli=_TRIM_CLI,
        remote_dry_run=_trim_dry_run,
    ),
)  # fmt: skip


# --- the group page's Undo --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LastReset:
    """What the group page's Undo shows of the newest successful reset (an audit row)."""

    id: int
    username: str
    created_at: datetime
    state_before: dict[str, Any]


#: ``last_reset``'s columns, in its statement's order.
_RESET_COLUMNS = ("id", "username", "created_at", "state_before")


@functools.cache
def _last_reset_statement(vendor: str) -> tuple[str, tuple[tuple[Any, list[Any]], ...]]:
    """``last_reset``'s SQL for a database backend, and each column's converters (what
    the ORM applies to them: the backend's, then the field's), built once per process."""
    del vendor  # the cache key: the statement and converters are the backend's
    meta = AuditEvent._meta
    q = connection.ops.quote_name
    cols: list[Field[Any, Any]] = []
    for name in _RESET_COLUMNS:
        field = meta.get_field(name)
        assert isinstance(field, Field), name  # concrete columns, never a relation
        cols.append(field)
    sql = (
        f"SELECT {', '.join(q(str(f.column)) for f in cols)} FROM {q(meta.db_table)}"
        f" WHERE {q('action')} = %s AND {q('stream')} = %s AND {q('group')} = %s"
        f" AND {q('result')} = %s ORDER BY {q('id')} DESC LIMIT 1"
    )
    converters = []
    for f in cols:
        col = f.get_col(meta.db_table)
        converters.append(
            (col, [*connection.ops.get_db_converters(col), *f.get_db_converters(connection)])
        )
    return sql, tuple(converters)


def last_reset(*, stream: str, group: str) -> LastReset | None:
    """The newest successful reset of ``group``, whose state before says where it was:
    the group page offers to reset it back there (Undo). One prepared SQL statement on
    the ``action`` index (the ORM's compile cost 1-2 ms a page for a 0.05 ms query)."""
    sql, converters = _last_reset_statement(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, ["reset-position", stream, group, AuditEvent.Result.OK.value])
        row = cursor.fetchone()
    if row is None:
        return None
    values = []
    for value, (col, funcs) in zip(row, converters, strict=True):
        for func in funcs:
            value = func(value, col, connection)
        values.append(value)
    return LastReset(*values)
