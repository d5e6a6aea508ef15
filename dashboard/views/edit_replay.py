"""Edit & replay a dead letter: the editor page, its POST, and the DLQ page's status.

Owns the editor (``dlq_edit``, GET: one textarea per payload field, JSON values
detected and pretty-printed, ``static/dashboard/field_editor.js`` validates them and
adds and removes fields; the reserved ``ackboard.*`` fields are shown, never editable),
its submission (``dlq_edit_replay``, POST: parse the edited rows, refuse bad JSON with a
400 naming the field, then ``queue_core.edited_replays.dead_letter_edit_replay``) and
``dlq_edit_context``, which the dead-letter page's context calls to show "replayed as
<id>, awaiting success". The page never writes: ``manage.py run_jobs`` deletes the dead
letters whose edited replay succeeded (``edited_replays_sweeper``, every few seconds).

The permission is ``dashboard.edit_replay_dead_letter``, apart from Replay's and granted
to no role by default (docs/failure-loop.md, "Edit & replay"). A refused POST is audited like any
action (``action_runner.denied``); a successful one's audit row keeps the diff of the
payload fields (``fields_diff``: changed, added and removed, each with its value before
and after; a value that is not UTF-8 is kept as base64; a redacted one as its size and
SHA-256 only), so the original can always be rebuilt from the new entry and the row.

Fields a browser cannot round-trip, or the operator may not see, are kept as they are and
never shown in a textarea: values that are not UTF-8 (or whose name is not), values that
``dashboard.views.payloads`` redacts, and values over ``EDIT_MAX_BYTES``. They may still be
removed. A textarea turns CRLF into LF unless the original value used CRLF; an unchanged
value (same text, or for JSON the same document) keeps its exact original bytes.

It writes to Redis only through ``queue_core.edited_replays``. Costs: the editor reads one
dead letter (one XRANGE) and its record (one HMGET); a replay is one Lua script plus the
state read and one INSERT.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from dashboard.access.permissions import EDIT_REPLAY, queues_view_required
from dashboard.access.scopes import may
from dashboard.runtime.connection import get_redis
from dashboard.views import payloads
from dashboard.views.action_runner import (
    ActionRequest,
    ActionResult,
    BadRequest,
    action_request,
    check_id,
    check_stream,
    denied,
    respond,
    run,
)
from dashboard.views.forms import ActionForm
from dashboard.views.htmx import HtmxHttpRequest
from queue_core import selectors
from queue_core.bounded_json import json_read
from queue_core.connection import Client
from queue_core.edited_replays import (
    EditedReplay,
    dead_letter_edit_replay,
    edited_replays_read,
)
from queue_core.keys import RESERVED_PREFIX, CrossSlotName
from queue_core.types import DeadLetterRow

#: Values larger than this are kept as they are, not put in a textarea.
EDIT_MAX_BYTES = 256 * 1024
#: At most this many fields in one edited entry (the script's own limit is ~3,990).
MAX_FIELDS = 1000
MODES = ("text", "json", "keep")


@dataclass(frozen=True, slots=True)
class EditorField:
    """One row of the editor: ``index`` in the dead letter's payload fields."""

    index: int
    name: str
    text: str
    mode: str  # text / json / keep
    why_kept: str = ""
    size: int = 0


def _decoded(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _payload(row: DeadLetterRow) -> list[tuple[bytes, bytes]]:
    return [(n, v) for n, v in row.entry.fields if not n.startswith(RESERVED_PREFIX.encode())]


def _is_container_json(text: str) -> Any:
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        value = json_read(text, max_size=None)  # at most EDIT_MAX_BYTES, checked before
    except ValueError:
        return None
    return value if isinstance(value, (dict, list)) else None


def editor_fields(row: DeadLetterRow, *, stream: str | None = None) -> list[EditorField]:
    """The editor's rows for the dead letter's own (non-reserved) fields (``stream``: whose
    decoders tell whether a field holds a redacted key)."""
    rows = []
    for index, (name, value) in enumerate(_payload(row)):
        name_text, value_text = _decoded(name), _decoded(value)
        view = payloads.field_view(name, value, stream=stream)
        why = ""
        if name_text is None or value_text is None:
            why = "not UTF-8 text"
        elif view.redacted:
            why = "redacted"
        elif len(value) > EDIT_MAX_BYTES:
            why = f"larger than {EDIT_MAX_BYTES // 1024} KB"
        if why:
            rows.append(EditorField(index, view.name, "", "keep", why, len(value)))
            continue
        assert name_text is not None and value_text is not None
        document = _is_container_json(value_text)
        if document is not None:
            pretty = json.dumps(document, indent=2, ensure_ascii=False)
            rows.append(EditorField(index, name_text, pretty, "json", size=len(value)))
        else:
            rows.append(EditorField(index, name_text, value_text, "text", size=len(value)))
    return rows


# --- the POST's rows --------------------------------------------------------------------


def _list(data: Mapping[str, Any], key: str) -> list[str]:
    getlist = getattr(data, "getlist", None)
    if getlist is not None:
        return [str(v) for v in getlist(key)]
    value = data.get(key, [])
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def edited_fields(
    data: Mapping[str, Any], original: Sequence[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    """The new entry's fields from the posted rows (``field_orig``, ``field_name``,
    ``field_value``, ``field_mode``, one of each per row). Raises BadRequest (400) saying
    which field is wrong: bad JSON, a reserved or empty or repeated name, a bad row."""
    origs, names = _list(data, "field_orig"), _list(data, "field_name")
    values, modes = _list(data, "field_value"), _list(data, "field_mode")
    if not len(origs) == len(names) == len(values) == len(modes):
        raise BadRequest("the edited fields arrived incomplete: reload the editor and try again")
    if len(names) > MAX_FIELDS:
        raise BadRequest(f"an edited entry has at most {MAX_FIELDS} fields")
    out: list[tuple[bytes, bytes]] = []
    seen: set[bytes] = set()
    for position, (orig, name, value, mode) in enumerate(
        zip(origs, names, values, modes, strict=True), start=1
    ):
        if mode not in MODES:
            raise BadRequest(f"field {position}: unknown kind {mode[:20]!r}")
        before: tuple[bytes, bytes] | None = None
        if orig:
            if not orig.isdigit() or int(orig) >= len(original):
                raise BadRequest(f"field {position}: it is not one of the dead letter's fields")
            before = original[int(orig)]
        if mode == "keep":
            if before is None:
                raise BadRequest(f"field {position}: only an existing field can be kept as is")
            pair = before
        else:
            pair = (_field_name(name, position), _field_value(name, value, mode, before))
        if pair[0] in seen:
            raise BadRequest(f"field {pair[0].decode(errors='replace')!r} appears twice")
        seen.add(pair[0])
        out.append(pair)
    if not out:
        raise BadRequest("the edited entry has no field left: nothing to replay")
    return out


def _field_name(name: str, position: int) -> bytes:
    name = name.strip()
    if not name:
        raise BadRequest(f"field {position} has no name")
    if name.startswith(RESERVED_PREFIX):
        raise BadRequest(f"field {name[:80]!r}: names starting with {RESERVED_PREFIX} are reserved")
    if "\x00" in name or len(name) > 1024:
        raise BadRequest(f"field {position}: its name is too long or holds a NUL")
    return name.encode()


def _field_value(name: str, value: str, mode: str, before: tuple[bytes, bytes] | None) -> bytes:
    old = _decoded(before[1]) if before is not None else None
    if mode == "json":
        try:
            # No size bound of its own: Django's DATA_UPLOAD_MAX_MEMORY_SIZE bounds the POST.
            document = json_read(value, max_size=None)
        except json.JSONDecodeError as exc:
            raise BadRequest(
                f"field {name.strip()[:80]!r} is not valid JSON (line {exc.lineno}, column "
                f"{exc.colno}): {exc.msg[:120]}"
            ) from None
        except ValueError as exc:  # a bound (too deep), or a number Python refuses
            raise BadRequest(f"field {name.strip()[:80]!r} is not valid JSON ({exc})") from None
        if before is not None and old is not None:
            with contextlib.suppress(ValueError):
                if json_read(old, max_size=None) == document:
                    return before[1]  # the same document: its exact original bytes
        return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
    # A textarea sends CRLF line ends: LF unless the original value itself used CRLF.
    text = value if old is not None and "\r\n" in old else _lf(value)
    if old is not None and before is not None and _lf(old) == _lf(text):
        return before[1]
    return text.encode()


def _lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def _diff_value(name: bytes, value: bytes, stream: str | None) -> Any:
    """A value for the audit row: its text, base64 when not UTF-8, a hash when redacted
    (as ``stream``'s decoders show it: a secret inside msgpack is redacted too)."""
    if payloads.field_view(name, value, stream=stream).redacted:
        return {"redacted": True, "bytes": len(value), "sha256": hashlib.sha256(value).hexdigest()}
    text = _decoded(value)
    if text is None:
        return {"base64": base64.b64encode(value).decode()}
    return text


def _diff_name(name: bytes) -> str:
    text = _decoded(name)
    return text if text is not None else "base64:" + base64.b64encode(name).decode()


def fields_diff(
    before: Sequence[tuple[bytes, bytes]],
    after: Sequence[tuple[bytes, bytes]],
    *,
    stream: str | None = None,
) -> dict[str, Any]:
    """The payload diff the audit row keeps: changed (before and after), added, removed,
    and the unchanged names."""
    old, new = dict(before), dict(after)

    def shown(name: bytes, value: bytes) -> Any:
        return _diff_value(name, value, stream)

    changed = {
        _diff_name(n): {"before": shown(n, old[n]), "after": shown(n, v)}
        for n, v in new.items()
        if n in old and old[n] != v
    }
    return {
        "changed": changed,
        "added": {_diff_name(n): shown(n, v) for n, v in new.items() if n not in old},
        "removed": {_diff_name(n): shown(n, v) for n, v in old.items() if n not in new},
        "unchanged": [_diff_name(n) for n, v in new.items() if old.get(n) == v],
    }


# --- views ------------------------------------------------------------------------------


def _fetch(client: Client, stream: str, dlq_id: str) -> DeadLetterRow:
    found = selectors.dead_letter_fetch(client=client, stream=stream, dlq_id=dlq_id)
    if found is None:
        raise BadRequest(f"no dead-letter entry {dlq_id} (replayed or deleted already?)", 404)
    return found


@require_GET
@never_cache
@queues_view_required
def dlq_edit(request: HttpRequest, stream: str, dlq_id: str) -> HttpResponse:
    """The editor of one dead letter (403 without the edit permission)."""
    if not may(request.user, EDIT_REPLAY, stream):
        raise PermissionDenied("You may not edit and replay dead letters.")
    try:
        check_stream(stream)
        check_id(dlq_id, "dead-letter id")
        client = get_redis()
        row = _fetch(client, stream, dlq_id)
    except BadRequest as exc:
        if exc.status == 404:
            raise Http404(str(exc)) from None
        return render(request, "400.html", {"exception": str(exc)}, status=400)
    record = edited_replays_read(client=client, stream=stream, dlq_ids=[dlq_id]).get(dlq_id)
    context = {
        "stream": stream,
        "row": row,
        "fields": editor_fields(row, stream=stream),
        "record": record,
        "reserved_prefix": RESERVED_PREFIX,
    }
    return render(request, "dashboard/dlq_edit.html", context)


@require_POST
@never_cache
@login_required
def dlq_edit_replay(request: HtmxHttpRequest, stream: str, dlq_id: str) -> HttpResponse:
    """Replay the dead letter with the edited fields, keeping it until that succeeds."""
    req, outcome = edit_replay_run(
        request,
        user=request.user,
        stream=stream,
        dlq_id=dlq_id,
        data=request.POST,
        edited=lambda original: edited_fields(request.POST, original),
        channel="button",
    )
    return respond(request, req, outcome)


def edit_replay_run(
    request: HtmxHttpRequest | None,
    *,
    user: Any,
    stream: str,
    dlq_id: str,
    data: Mapping[str, Any],
    edited: Callable[[list[tuple[bytes, bytes]]], list[tuple[bytes, bytes]]],
    channel: str,
) -> tuple[ActionRequest, ActionResult]:
    """The edit & replay of a dead letter by ``user``, audited whatever happens: the
    editor's POST (``request``), a terminal's or a script's (None). ``edited`` makes the
    new entry's fields from the dead letter's payload fields; ``data`` holds the form's
    ``reason``, ``force``, ``place`` and ``next``."""
    req = action_request(request, ActionForm(data), action="edit-replay", stream=stream,
                         group="", ids=[dlq_id[:64]], default_place="dlq", home="dlq",
                         channel=channel)  # fmt: skip
    req.place = "dlq"
    found: list[DeadLetterRow] = []

    def state() -> dict[str, Any]:
        check_stream(stream)
        check_id(dlq_id, "dead-letter id")
        row = _fetch(get_redis(), stream, dlq_id)
        found.append(row)
        req.group = row.group
        return {"origin_group": row.group, "origin_id": row.origin_id, "reason": row.reason}

    if not may(user, EDIT_REPLAY, stream):
        with contextlib.suppress(BadRequest, redis.RedisError, ValueError, CrossSlotName):
            state()  # the refusal's audit row names the dead letter's group
        return req, denied(user, req)

    def call() -> ActionResult:
        original = _payload(found[0])
        fields = edited(original)
        done = dead_letter_edit_replay(
            client=get_redis(),
            stream=stream,
            dlq_id=dlq_id,
            fields=fields,
            operator=user.get_username(),
            force=data.get("force") == "1",
        )
        return ActionResult(
            "ok",
            f"Dead-letter entry {dlq_id} replayed with edits to group {done.group} as "
            f"{done.new_id}; it is kept until that entry is acknowledged.",
            new_ids=[done.new_id],
            reported={"diff": fields_diff(original, fields, stream=stream),
                      "forced_over": done.previous_new_id},
        )  # fmt: skip

    return req, run(user, req, state_before=state, call=call)


@dataclass(frozen=True)
class FieldChanges:
    """A terminal's or a script's edit: ``set`` (name to text), ``set_json`` (name to a
    JSON document) and ``drop`` (names). Every other field is kept as it is."""

    set: Mapping[str, str]
    set_json: Mapping[str, str]
    drop: Sequence[str]

    def edited(self, original: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The new entry's fields: the changes as the editor's rows, through
        ``edited_fields`` (so the same rules and the same 400s)."""
        named = [*self.set, *self.set_json, *self.drop]
        twice = sorted({n for n in named if named.count(n) > 1})
        if twice:
            raise BadRequest(f"field {twice[0][:80]!r} is both set and dropped, or set twice")
        names = {name.decode("utf-8", "replace"): i for i, (name, _) in enumerate(original)}
        for name in self.drop:
            if name not in names:
                raise BadRequest(f"there is no field {name[:80]!r} to drop")
        rows: dict[str, list[str]] = {k: [] for k in _ROWS}
        for i, (raw, _) in enumerate(original):
            name = raw.decode("utf-8", "replace")
            if name in self.drop:
                continue
            mode, value = "keep", ""
            if name in self.set:
                mode, value = "text", self.set[name]
            elif name in self.set_json:
                mode, value = "json", self.set_json[name]
            _row(rows, str(i), name, value, mode)
        for name, value in self.set.items():
            if name not in names:
                _row(rows, "", name, value, "text")
        for name, value in self.set_json.items():
            if name not in names:
                _row(rows, "", name, value, "json")
        return edited_fields(rows, original)


_ROWS = ("field_orig", "field_name", "field_value", "field_mode")


def _row(rows: dict[str, list[str]], orig: str, name: str, value: str, mode: str) -> None:
    for key, item in zip(_ROWS, (orig, name, value, mode), strict=True):
        rows[key].append(item)


# --- the dead-letter page's part ---------------------------------------------------------


def dlq_edit_context(*, client: Client, stream: str, dlq_ids: Sequence[str]) -> dict[str, Any]:
    """The records of the page's dead letters, for "replayed as <id>, awaiting success"
    (one HMGET)."""
    records: dict[str, EditedReplay] = {}
    with contextlib.suppress(redis.ResponseError, CrossSlotName):
        records = edited_replays_read(client=client, stream=stream, dlq_ids=dlq_ids)
    return {"edited_replays": records}
