"""Retry later: the action-table row that parks a pending entry until a chosen time.

Owns one row of the action table (``ROWS``, merged into
``dashboard.views.actions.ACTIONS``): its one service call
(``queue_core.later.entry_retry_later``) and the message it answers with, its
permission, its explanation, its button (a confirm dialog with a "Due at (UTC)" or
"in" field: ``Button.due``) and its subcommand (``retry-later STREAM GROUP ID --at ISO |
--in 10m``). The form (``forms.RetryLaterForm``) turns what was posted into the due
time and refuses a malformed, past or too distant one with a 400.

It writes Redis only through that service (one index SADD and one atomic script) and
never reads it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from dashboard.views.action_cli import GROUP, STREAM, Arg, Cli
from dashboard.views.action_runner import ActionResult
from dashboard.views.action_table import Action, Button, Call
from dashboard.views.forms import RetryLaterForm
from queue_core import later


def due_text(due_ms: int) -> str:
    """A due time as the pages and messages print it: ``2026-03-14 15:30:00 UTC``."""
    return datetime.fromtimestamp(due_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _retry_later(call: Call) -> ActionResult:
    due_ms = call.data["due_ms"]
    parked = later.entry_retry_later(
        client=call.client,
        stream=call.req.stream,
        group=call.req.group,
        entry_id=call.entry_id,
        due_ms=due_ms,
        expected_consumer=call.data["seen_consumer"],
    )
    seen = call.seen.row if call.seen is not None else None
    after = seen and replace(seen, consumer=later.LATER_CONSUMER, idle_ms=0)
    return ActionResult(
        "ok",
        f"Entry {call.entry_id} will be retried in {call.req.group} at {due_text(due_ms)} "
        "(parked until then).",
        reported={
            "due_at": due_text(due_ms),
            "due_ms": due_ms,
            "previous_consumer": parked.previous_consumer,
        },
        pending_row=after,
    )


_CLI = Cli(
    "retry pending entries at a chosen time (UTC)",
    (
        STREAM,
        GROUP,
        Arg(("ids",), {"nargs": "+", "metavar": "ID"}, target="id"),
        Arg(("--at",), {"default": "", "help": "ISO date and time, UTC unless it has an "
            "offset."}, field="due_at", exclusive="required"),
        Arg(("--in",), {"default": "", "dest": "due_in", "help": "From now: 90s, 10m, 2h, 1d."},
            field="due_in", exclusive="required"),
        Arg(("--seen-consumer",), {"default": "", "help": "The owner you expect."},
            field="seen_consumer"),
        Arg(("--reason",), {"default": "", "help": "Audited (optional)."}, field="reason"),
    ),
)  # fmt: skip

ROWS: tuple[Action, ...] = (
    Action(
        "retry-later", "pending", RetryLaterForm, _retry_later,
        permission="dashboard.retry_later_entry",
        explain=(
            "Retry later parks it until the time you give (UTC), then makes it due at the "
            "next reclaim sweep of a {group} worker. Same id, this group only; its delivery "
            "count is unchanged. Kept parked by the workers' sweeps and manage.py run_jobs: "
            "with neither running it is reclaimed at the workers' --min-idle-ms instead."
        ),
        button=Button("Retry later", due=True),
        cli=_CLI,
    ),
)  # fmt: skip
