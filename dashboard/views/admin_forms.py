"""What the group-administration actions accept: Create group, Delete group, Reset
position and Trim, one Django form each.

Owns parsing those POSTs (the buttons', and the fields ``manage.py ackboard`` and the
JSON API pass) and their refusals: a malformed form is a 400 whose message is the first
problem, in field order, as ``dashboard.views.forms`` does for the entry actions. A position
("start", "end", an id, or a time in UTC) is read by ``queue_core.admin.position_parse``,
the one parser of positions, so a button, the CLI and the API accept the same text.

Forms never touch Redis, never check permissions and never call a service: the views in
``dashboard.views.admin_actions`` do. Pure Python, no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError

from dashboard.display.converters import name_problem
from dashboard.views.forms import PostedText, StreamIdField, TargetForm, WholeNumberField
from queue_core import admin

#: The position choices the pages offer; the CLI and the API may post the text itself
#: ("start", "end", an id or a time) as ``position``.
POSITION_KINDS = ("start", "end", "id", "time")


def _ticked(value: str) -> bool:
    return value.strip().lower() in ("1", "on", "true", "yes")


class PositionForm(TargetForm):
    """A position: ``position`` is start, end, id or time, and ``at`` the id or the
    time for the last two; or ``position`` is the text itself (the CLI's and the API's
    way). A time without a zone is read as UTC, as the pages say."""

    position = PostedText()
    at = PostedText()

    #: The refusal for a blank position.
    position_missing = "Choose where the group starts: start, end, an id or a time (UTC)."

    def position_text(self) -> str:
        kind: str = self.cleaned_data.get("position", "")
        at: str = self.cleaned_data.get("at", "")
        if kind in ("id", "time"):
            if not at:
                what = "an id like 1700000000000-0" if kind == "id" else "a time (UTC)"
                raise ValidationError(f"Give {what} for the position.")
            return _utc(at) if kind == "time" else at
        if not kind:
            raise ValidationError(self.position_missing)
        return kind if kind in ("start", "end") else _utc(kind)

    def parsed_position(self) -> admin.Position:
        """The position posted, or a ValidationError that says what is wrong with it."""
        text = self.position_text()
        try:
            parsed = admin.position_parse(text)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        kind = self.cleaned_data.get("position", "")
        if kind in ("id", "time") and parsed.kind != kind:
            raise ValidationError(
                f"{text!r} is not {'a stream id' if kind == 'id' else 'a time'}; "
                "choose the matching kind of position."
            )
        return parsed


def _utc(text: str) -> str:
    """A date and time without a zone, as a page's field posts it, read as UTC ("Z"
    added); anything else as given, for ``admin.position_parse`` to read or refuse."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    return text + "Z" if moment.tzinfo is None and len(text) > 10 else text


class CreateGroupForm(PositionForm):
    """Create group: its name and where it starts."""

    name = PostedText(strip=False)

    field_order = ("name", "position", "at", "reason", "place", "next")

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if not name.strip():
            raise ValidationError("Give the new group a name.")
        problem = name_problem(name)
        if problem is not None:
            raise ValidationError(f"That group name cannot be used here ({problem}).")
        return name

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "name" in data:
            data["parsed"] = self.parsed_position()
        return data


class DeleteGroupForm(TargetForm):
    """Delete group: the name typed again; with entries pending, the count the page
    showed, ticked as acknowledged, and a reason."""

    confirm_name = PostedText(strip=False)
    expected_pending = WholeNumberField("expected_pending")
    acknowledge = PostedText()

    def clean_confirm_name(self) -> str:
        typed: str = self.cleaned_data["confirm_name"]
        if typed != self.target.group:
            raise ValidationError("Type the group's name exactly to confirm the delete.")
        return typed

    def clean_acknowledge(self) -> bool:
        return _ticked(self.cleaned_data["acknowledge"])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("acknowledge") and not data.get("reason"):
            raise ValidationError(
                "Deleting a group with pending entries needs a reason: say why they may be dropped."
            )
        if data.get("acknowledge") and data.get("expected_pending") is None:
            raise ValidationError(
                "expected_pending is required: the number of pending entries you acknowledge."
            )
        return data


class ResetPositionForm(PositionForm):
    """Reset position: where to, and on confirmation the position the dry run showed
    (``expected_before_id``), so a group that moved since is refused, not reset."""

    confirm = PostedText()
    expected_before_id = StreamIdField("expected_before_id")

    position_missing = "Choose the new position: start, end, an id or a time (UTC)."

    def clean_confirm(self) -> bool:
        return _ticked(self.cleaned_data["confirm"])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        data["parsed"] = self.parsed_position()
        if data.get("confirm") and not data.get("expected_before_id"):
            raise ValidationError(
                "A confirmed reset needs the position its dry run showed "
                "(expected_before_id), so a group that moved since is not reset."
            )
        return data


class TrimForm(TargetForm):
    """Trim: the oldest id to keep (``minid``: an id, or a time in UTC); on
    confirmation, ``force`` with the stream's name typed to go past the floor."""

    minid = PostedText()
    confirm = PostedText()
    force = PostedText()
    confirm_name = PostedText(strip=False)

    def clean_minid(self) -> str:
        text: str = self.cleaned_data["minid"]
        if not text:
            raise ValidationError(
                "Give the oldest id to keep (like 1700000000000-0) or a time (UTC)."
            )
        return trim_minid(text)

    def clean_confirm(self) -> bool:
        return _ticked(self.cleaned_data["confirm"])

    def clean_force(self) -> bool:
        return _ticked(self.cleaned_data["force"])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("force") and data.get("confirm_name") != self.target.stream:
            raise ValidationError("Trimming past the floor needs the stream's name typed exactly.")
        return data


def trim_minid(text: str) -> str:
    """The MINID of a trim: an id as given, a bare ms as ``<ms>-0``, a time as the first
    id of that millisecond (entries added before it are trimmed). ValidationError else."""
    try:
        parsed = admin.position_parse(_utc(text))
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    if parsed.kind == "time" and parsed.time_ms is not None:
        return f"{parsed.time_ms}-0"
    if parsed.kind != "id":
        raise ValidationError("Trim needs an id or a time (UTC), not start or end.")
    return parsed.id
