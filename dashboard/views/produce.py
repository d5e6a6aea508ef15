"""Produce and Duplicate: add an entry to a stream by hand, or a copy of an entry.

Owns two rows of the action table (``ROWS``, merged into ``dashboard.views.actions``):
"produce", a "stream" row (``streams/<s>/do/produce/``) whose fields are edited in the
Produce page (``produce_page``, GET: edit & replay's field editor, empty, with its JSON
checks, ``static/dashboard/field_editor.js``) and confirmed in its dialog; and
"duplicate", an "entry" row (``streams/<s>/entries/<id>/do/duplicate/``) whose button
is on the entry page. Their form (``ProduceForm``) parses the editor's rows with the
editor's own parser (``edit_replay.edited_fields``: the same 400s naming the field) and
bounds (``queue_core.produce.fields_check``). Both answer with the new entry's page.

Both need one permission, ``dashboard.produce_entries``: a duplicate is a produce of
fields someone wrote before, and it carries the same risk (a new entry every group of
the stream runs, side effects included); a user who may produce could type the copy
anyway. The stream patterns of a role (``dashboard.access.scopes``) decide the streams,
as for every action; a refusal is audited (403) by the runner.

Each attempt's audit row keeps the fields (``fields``: name to value, as edit & replay's
diff keeps them: a redacted value as its size and SHA-256, a value that is not UTF-8 as
base64), the new id (``new_ids``) and, for a duplicate, the source's (``entry_ids``).

A terminal's ``produce`` (``dashboard.management.produce``) and the API's
``/api/v1/actions/produce`` post the same rows; without ``confirm`` they get the dry
run (``produce_dry_run``). ``duplicate`` is a plain row: its subcommand and API action
are derived from it.

It writes to Redis only through ``queue_core.produce``. Costs: the page reads the
stream's summary (one round trip); a produce reads it again (the 404 for a missing
stream) and runs one script; a duplicate reads the entry (one XRANGE) for the audit
row and runs one script; each writes one INSERT.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from dashboard.access.permissions import queues_view_required
from dashboard.access.scopes import may
from dashboard.runtime.connection import get_redis
from dashboard.views.action_cli import STREAM, Arg, Cli, reason
from dashboard.views.action_runner import ActionResult, BadRequest, check_stream
from dashboard.views.action_table import Action, Button, Call, Remote
from dashboard.views.answer import Answer, refusal
from dashboard.views.edit_replay import FieldChanges, edited_fields, fields_diff
from dashboard.views.forms import ActionForm, PostedText, Target, TargetForm
from queue_core import selectors
from queue_core.keys import RESERVED_PREFIX
from queue_core.produce import entry_duplicate, fields_check, stream_produce

#: The one permission of both rows (see the module's docstring).
PRODUCE = "dashboard.produce_entries"
_RESERVED = RESERVED_PREFIX.encode()


def _ticked(value: str) -> bool:
    return value.strip().lower() in ("1", "on", "true", "yes")


def produced_fields(data: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
    """The new entry's fields from the editor's rows (``field_orig`` empty,
    ``field_name``, ``field_value``, ``field_mode`` text or json), through edit & replay's
    parser and the core's bounds. BadRequest (400) saying which field is wrong."""
    getlist = getattr(data, "getlist", None)
    names = getlist("field_name") if getlist is not None else data.get("field_name")
    if not names:
        raise BadRequest("the entry has no field: add one (a name and a value)")
    fields = edited_fields(data, [])
    try:
        return fields_check(fields)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def produce_rows(changes: FieldChanges) -> dict[str, list[str]]:
    """The editor's rows for a terminal's or a script's fields (``set``: text,
    ``set_json``: JSON documents), as the Produce page posts them."""
    rows: dict[str, list[str]] = {k: [] for k in ("field_orig", "field_name", "field_value",
                                                  "field_mode")}  # fmt: skip
    for mode, given in (("text", changes.set), ("json", changes.set_json)):
        for name, value in given.items():
            for key, item in zip(rows, ("", name, value, mode), strict=True):
                rows[key].append(item)
    return rows


class ProduceForm(TargetForm):
    """Produce: the editor's rows, ``confirm`` (the dialog's, or ``--yes``) and
    ``create`` (make the stream if it does not exist; never from the page)."""

    confirm = PostedText()
    create = PostedText()

    def clean_confirm(self) -> bool:
        return _ticked(self.cleaned_data["confirm"])

    def clean_create(self) -> bool:
        return _ticked(self.cleaned_data["create"])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            data["fields"] = produced_fields(self.data)
        except BadRequest as exc:
            raise ValidationError(str(exc)) from None
        return data


def _shown(fields: Sequence[tuple[bytes, bytes]], stream: str) -> dict[str, Any]:
    """The fields as the audit row keeps them (edit & replay's diff: redacted, base64)."""
    added: dict[str, Any] = fields_diff([], fields, stream=stream)["added"]
    return added


def _entry_url(stream: str, entry_id: str) -> str:
    with contextlib.suppress(NoReverseMatch):
        return reverse("dashboard:entry-detail", args=[stream, entry_id])
    return ""


def _stream_exists(stream: str) -> bool:
    return bool(selectors.stream_summaries(client=get_redis(), streams=[stream]))


# --- Produce ----------------------------------------------------------------------------


def _produce_before(call: Call) -> dict[str, Any]:
    """The fields for the audit row (when they parsed); 404 for a missing stream unless
    ``create`` (the script checks again, atomically)."""
    state: dict[str, Any] = {"create": bool(call.data.get("create"))}
    if "fields" in call.data:
        state["fields"] = _shown(call.data["fields"], call.req.stream)
    if not call.data.get("create") and not _stream_exists(call.req.stream):
        raise BadRequest(
            f"no stream {call.req.stream!r}: nothing was added (producing to a new name "
            "needs create)",
            404,
        )
    return state


def _produce(call: Call) -> ActionResult:
    data = call.data
    if not data["confirm"]:
        raise BadRequest(
            "Produce adds an entry that every group of the stream will run: confirm it "
            "(confirm=1, or --yes)."
        )
    fields: list[tuple[bytes, bytes]] = data["fields"]
    done = stream_produce(
        client=call.client, stream=call.req.stream, fields=fields, create=data["create"]
    )
    return ActionResult(
        "ok",
        f"Entry {done.new_id} added to {call.req.stream} ({len(fields)} "
        f"field{'' if len(fields) == 1 else 's'}).",
        new_ids=[done.new_id],
        redirect=_entry_url(call.req.stream, done.new_id),
    )


def produce_dry_run(remote: Remote) -> Answer:
    """What a produce would add, for a terminal or a script without ``confirm``: the
    fields parsed and checked as a confirmed one's are, the stream checked. Changes
    nothing, audits nothing (as every dry run)."""
    stream = remote.stream
    try:
        check_stream(stream)
        form = ProduceForm(remote.fields, target=Target(stream=stream))
        fields = produced_fields(remote.fields)
        create = form.is_valid() and form.cleaned_data["create"]
        if not create and not _stream_exists(stream):
            raise BadRequest(f"no stream {stream!r} (add --create to make it)", 404)
    except BadRequest as exc:
        return refusal(exc.status, str(exc))
    names = ", ".join(n.decode(errors="replace")[:40] for n, _ in fields[:10])
    more = f" and {len(fields) - 10} more" if len(fields) > 10 else ""
    message = (
        f"Dry run: would add an entry of {len(fields)} field{'' if len(fields) == 1 else 's'} "
        f"({names}{more}) to {stream}. Nothing was changed."
    )
    payload = {
        "ok": True,
        "dry_run": True,
        "action": "produce",
        "stream": stream,
        "fields": _shown(fields, stream),
        "create": bool(create),
        "message": message,
    }
    return Answer(200, payload)


# --- Duplicate --------------------------------------------------------------------------


def _duplicate_before(call: Call) -> dict[str, Any]:
    """The source's own fields, for the audit row; 404 when it is not in the stream."""
    stream, entry_id = call.req.stream, call.entry_id
    found = selectors.entries_fetch(client=call.client, stream=stream, ids=[entry_id])
    entry = found.get(entry_id)
    if entry is None:
        raise BadRequest(f"no entry {entry_id} in stream {stream!r} (deleted or trimmed?)", 404)
    own = [(n, v) for n, v in entry.fields if not n.startswith(_RESERVED)]
    return {"fields": _shown(own, stream)}


def _duplicate(call: Call) -> ActionResult:
    done = entry_duplicate(client=call.client, stream=call.req.stream, entry_id=call.entry_id)
    left = (
        f"; {done.left_out} {RESERVED_PREFIX}* field{'' if done.left_out == 1 else 's'} not copied"
        if done.left_out
        else ""
    )
    return ActionResult(
        "ok",
        f"Entry {done.source_id} duplicated as {done.new_id} on {call.req.stream}{left}.",
        new_ids=[done.new_id],
        redirect=_entry_url(call.req.stream, done.new_id),
        reported={"source_id": done.source_id, "left_out": done.left_out},
    )


_DUPLICATE_CLI = Cli(
    "add a copy of entries to the end of their stream (every group runs it)",
    (
        STREAM,
        Arg(("ids",), {"nargs": "+", "metavar": "ENTRY_ID"}, target="id"),
        reason(),
    ),
)

ROWS: tuple[Action, ...] = (
    Action(
        "produce", "stream", ProduceForm, _produce, before=_produce_before,
        permission=PRODUCE,
        explain=(
            "Produce adds a new entry with these fields to the end of the stream (XADD): "
            "every consumer group of the stream will deliver it to its workers."
        ),
        remote_dry_run=produce_dry_run,
    ),
    Action(
        "duplicate", "entry", ActionForm, _duplicate, before=_duplicate_before,
        permission=PRODUCE,
        explain=(
            "Duplicate adds a copy of this entry's fields to the end of the stream, with a "
            "new id: every consumer group will run it (again). Ackboard's own ackboard.* "
            "fields are not copied."
        ),
        cli=_DUPLICATE_CLI,
        button=Button("Duplicate", ask=True),
    ),
)  # fmt: skip


# --- the Produce page -------------------------------------------------------------------


@require_GET
@never_cache
@queues_view_required
def produce_page(request: HttpRequest, stream: str) -> HttpResponse:
    """The Produce editor of ``stream``: one empty field to start (403 without the
    permission on that stream, 404 for a stream that does not exist)."""
    if not may(request.user, PRODUCE, stream):
        raise PermissionDenied("You may not produce entries to this stream.")
    try:
        check_stream(stream)
    except BadRequest as exc:
        if exc.status == 404:
            raise Http404(str(exc)) from None
        return render(request, "400.html", {"exception": str(exc)}, status=400)
    if not _stream_exists(stream):
        raise Http404(f"no stream {stream!r}")
    context = {"stream": stream, "reserved_prefix": RESERVED_PREFIX}
    return render(request, "dashboard/produce.html", context)
