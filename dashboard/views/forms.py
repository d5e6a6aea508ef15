"""What each operator action accepts: one Django form per action's POST.

Owns the parsing of the action forms (Retry, Retry later, Claim, Dead-letter, Acknowledge, Replay,
Delete, Purge; Pause, Resume, Retire, Retire idle consumers; bulk's form is
``dashboard.views.bulk.BulkForm``, built from the fields here), ``TargetForm``, the base
of a form that acts on a group, a consumer or a stream and is told which (``Target``),
and their refusals: a malformed form is a 400 whose message is the first problem
in the order the fields are declared, which is the order the checks run.

The fields every action shares (``reason``, ``place``, ``next``) never refuse: a reason
is trimmed and cut by ``queue_core.validation.reason_check``, an unknown place falls
back to the page's default and ``next`` is checked against the host by the view, so a
refused attempt is still audited with its reason. Text is taken as posted (NUL
included: the audit row cleans it, and Redis stores bytes).

Forms never touch Redis, never check permissions and never call a service: the views
in ``dashboard.views.actions`` and ``dashboard.views.bulk`` do. Pure Python, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from queue_core import clock, later
from queue_core.validation import entry_id_check, reason_check

#: A count or a time in ms as the pages print it: digits only, at most 15 of them.
_WHOLE = re.compile(r"\A\d{1,15}\Z")
#: Redis allows longer consumer names; the dashboard refuses them before asking Redis.
MAX_CONSUMER_LENGTH = 255


# --- fields -----------------------------------------------------------------------------


class PostedText(forms.Field):
    """Text as posted, never refused: ``""`` when absent; ``strip`` trims it.

    Unlike ``CharField`` it has no length or NUL validator: a value is refused, if at
    all, by the check that can say why.
    """

    def __init__(self, *, strip: bool = True) -> None:
        super().__init__(required=False)
        self.strip = strip

    def to_python(self, value: Any) -> str:
        text = "" if value is None else str(value)
        return text.strip() if self.strip else text


class WholeNumberField(forms.Field):
    """A count or a time in ms that a page printed: up to 15 digits; blank is None.

    ``name`` is the field's posted name, which the refusal repeats ("seen_idle_ms must
    be a whole number"): these fields are hidden, so the name is what a reader can find.
    """

    def __init__(self, name: str, *, required: bool = False) -> None:
        super().__init__(
            required=required,
            error_messages={
                "required": f"{name} is required",
                "invalid": f"{name} must be a whole number",
            },
        )

    def to_python(self, value: Any) -> int | None:
        raw = ("" if value is None else str(value)).strip()
        if not raw:
            return None
        if not _WHOLE.match(raw):
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return int(raw)


class StreamIdField(forms.Field):
    """A full stream id (``<ms>-<seq>``), trimmed; blank is None. ``what`` names it in
    the refusal; ``missing`` is the refusal for a required one left blank."""

    def __init__(self, what: str, *, missing: str = "") -> None:
        super().__init__(required=bool(missing), error_messages={"required": missing})
        self.what = what

    def to_python(self, value: Any) -> str | None:
        raw = ("" if value is None else str(value)).strip()
        if not raw:
            return None
        try:
            return entry_id_check(raw, what=self.what)
        except ValueError as exc:
            raise ValidationError(str(exc), code="invalid") from None


class NameListField(forms.Field):
    """Every posted value of a repeated field of names (``names``), blanks dropped, each
    as posted (a consumer name may hold spaces); checked by the form."""

    widget = forms.MultipleHiddenInput

    def __init__(self) -> None:
        super().__init__(required=False)

    def to_python(self, value: Any) -> list[str]:
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in value or () if str(v).strip()]


class StreamIdListField(forms.Field):
    """Every posted value of a repeated field (``ids``), trimmed, blanks dropped.

    Each id is checked by the form, which knows whether the list is used at all.
    """

    widget = forms.MultipleHiddenInput

    def __init__(self) -> None:
        super().__init__(required=False)

    def to_python(self, value: Any) -> list[str]:
        return [str(v).strip() for v in value or () if str(v).strip()]


# --- forms ------------------------------------------------------------------------------


class ActionForm(forms.Form):
    """The fields every action posts, none of which refuses. Replay and Delete post only
    these; Retry posts ``seen_consumer`` too, which it does not need."""

    reason = PostedText()
    #: Where the buttons were (``dashboard.views.actions.PLACES``).
    place = PostedText(strip=False)
    #: The page to return to after a plain POST.
    next = PostedText(strip=False)

    def clean_reason(self) -> str:
        # The core's rule for audit text: trimmed, then cut (not refused) at its limit.
        return reason_check(self.cleaned_data["reason"], required=False)

    def problem(self) -> str | None:
        """The first refusal in field order (then the form-wide ones), or None."""
        for errors in self.errors.values():
            return str(errors[0])
        return None


class ClaimForm(ActionForm):
    """Claim: the new owner, and what the operator saw (the compare-and-set guard)."""

    consumer = PostedText()
    seen_idle_ms = WholeNumberField("seen_idle_ms", required=True)
    seen_deliveries = WholeNumberField("seen_deliveries")
    seen_consumer = PostedText()

    def clean_consumer(self) -> str:
        consumer: str = self.cleaned_data["consumer"] or settings.ACKBOARD_OPERATOR_CONSUMER
        if len(consumer) > MAX_CONSUMER_LENGTH:
            raise ValidationError(f"consumer name is longer than {MAX_CONSUMER_LENGTH} characters")
        return consumer


class DeadLetterForm(ActionForm):
    """Dead-letter: the owner the operator saw, which must still own the entry."""

    seen_consumer = PostedText()


class AcknowledgeForm(ActionForm):
    """Acknowledge discards the entry: the reason is required."""

    def clean_reason(self) -> str:
        reason = super().clean_reason()
        if not reason:
            raise ValidationError(
                "Acknowledge needs a reason: say why this entry may be discarded."
            )
        return reason


#: A Retry later duration: a number and a unit (s, m, h, d; minutes when none).
_DURATION = re.compile(r"\A(\d{1,9})\s*([smhd]?)\Z")
_UNIT_MS = {"s": 1000, "m": 60_000, "": 60_000, "h": 3_600_000, "d": 86_400_000}


def due_parse(due_at: str, due_in: str, *, now_ms: int) -> int:
    """The due time (epoch ms) of Retry later from exactly one of ``due_at`` (an ISO 8601
    date and time; UTC unless it names an offset) and ``due_in`` (``10m``, ``90s``,
    ``2h``, ``1d``; a bare number is minutes). ValidationError with the reason, for none,
    both, a malformed one, a time not in the future or too far ahead."""
    if bool(due_at) == bool(due_in):
        raise ValidationError("Give a due time: either a date and time (UTC) or 'in' a duration.")
    if due_in:
        match = _DURATION.match(due_in.lower())
        if match is None:
            raise ValidationError("'in' must be a number and a unit: 90s, 10m, 2h or 1d.")
        due_ms = now_ms + int(match[1]) * _UNIT_MS[match[2]]
    else:
        try:
            if len(due_at) > 40:
                raise ValueError(due_at)
            when = datetime.fromisoformat(due_at)
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            due_ms = int(when.timestamp() * 1000)
        except (ValueError, OverflowError):
            raise ValidationError(
                "The due time must be a date and time such as 2026-03-14T15:30 (UTC)."
            ) from None
    try:
        return later.due_check(due_ms, now_ms=now_ms)
    except ValueError as exc:
        raise ValidationError(f"{str(exc)[0].upper()}{str(exc)[1:]}.") from None


class RetryLaterForm(ActionForm):
    """Retry later: when (``due_at`` or ``due_in``, as ``due_ms``), and the owner the
    operator saw, which must still own the entry."""

    seen_consumer = PostedText()
    due_at = PostedText()
    due_in = PostedText()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "due_at" in data and "due_in" in data:
            data["due_ms"] = due_parse(data["due_at"], data["due_in"], now_ms=clock.now_ms())
        return data


class PurgeForm(ActionForm):
    """Purge: the stream's name typed again, and the dead-letter stream as the page saw
    it (its length, and its newest id on the first page), so nothing newer is lost."""

    confirm_name = PostedText(strip=False)
    expected_length = WholeNumberField("expected_length", required=True)
    newest_id = StreamIdField("newest dead-letter id")

    def __init__(self, *args: Any, stream: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stream = stream

    def clean_confirm_name(self) -> str:
        typed: str = self.cleaned_data["confirm_name"]
        if typed != self.stream:
            raise ValidationError("Type the stream's name exactly to confirm the purge.")
        return typed


# --- forms of actions on a group, a consumer or a stream --------------------------------


@dataclass(frozen=True)
class Target:
    """What an action on a group, a consumer or a stream acts on, as the route named it:
    ``group`` is "" for a stream's action, ``consumer`` "" unless it is a consumer's."""

    stream: str
    group: str = ""
    consumer: str = ""


class TargetForm(ActionForm):
    """The base of the forms of "group", "consumer" and "stream" actions
    (``dashboard.views.action_table.KINDS``): it knows its target, for a typed
    confirmation (the group's name) or a check against it (not handing entries to the
    consumer being retired)."""

    def __init__(self, *args: Any, target: Target, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target = target


def consumer_name_check(name: str, what: str = "consumer name") -> str:
    """``name`` unless it is empty or longer than the dashboard takes (ValidationError)."""
    if not name:
        raise ValidationError(f"{what} is required")
    if len(name) > MAX_CONSUMER_LENGTH:
        raise ValidationError(f"{what} is longer than {MAX_CONSUMER_LENGTH} characters")
    if "\x00" in name:
        raise ValidationError(f"{what} contains a NUL character")
    return name


#: The longest auto-resume a pause takes: 30 days.
MAX_PAUSE_MINUTES = 30 * 24 * 60


class PauseForm(TargetForm):
    """Pause: a reason (required: it is what every worker and operator sees), and an
    optional auto-resume, either ``resume_minutes`` from now (the page's field) or
    ``resume_at``, a UTC time (``2026-12-01T23:00``, ``…Z`` or ``…+00:00``; the CLI's and
    API's too). The view turns either into ``until_ms``."""

    resume_minutes = WholeNumberField("resume_minutes")
    resume_at = PostedText()

    def clean_reason(self) -> str:
        reason = super().clean_reason()
        if not reason:
            raise ValidationError("Pause needs a reason: say why (it is shown to everyone).")
        return reason

    def clean_resume_minutes(self) -> int | None:
        minutes: int | None = self.cleaned_data["resume_minutes"]
        if minutes is not None and not 1 <= minutes <= MAX_PAUSE_MINUTES:
            raise ValidationError(
                f"resume_minutes must be between 1 and {MAX_PAUSE_MINUTES} (30 days)"
            )
        return minutes

    def clean_resume_at(self) -> int | None:
        """``resume_at`` as ms since the epoch (UTC), or None when blank."""
        raw: str = self.cleaned_data["resume_at"]
        if not raw:
            return None
        text = raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise ValidationError(
                "resume_at must be a UTC time such as 2026-12-01T23:00 (or …Z)"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        elif when.utcoffset():
            raise ValidationError("resume_at must be in UTC (no offset, Z or +00:00)")
        return int(when.timestamp() * 1000)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("resume_minutes") is not None and data.get("resume_at") is not None:
            raise ValidationError("Give resume_minutes or resume_at, not both.")
        return data


class ResumeForm(TargetForm):
    """Resume: only the shared fields (the reason is optional and audited)."""


class RetireForm(TargetForm):
    """Retire one consumer: ``mode`` "move" hands its pending entries to the live
    consumer ``to``; "reclaim" makes them due for the workers' next reclaim sweep."""

    mode = PostedText()
    to = PostedText(strip=False)

    def clean_mode(self) -> str:
        mode: str = self.cleaned_data["mode"]
        if mode not in ("move", "reclaim"):
            raise ValidationError(
                "mode must be 'move' (hand its entries to another consumer) or 'reclaim' "
                "(make them due for reclaim)"
            )
        return mode

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("mode") != "move":
            data["to"] = ""
            return data
        to = consumer_name_check(data.get("to", ""), "the consumer to hand its entries to")
        if to == self.target.consumer:
            raise ValidationError("Choose another consumer than the one being retired.")
        data["to"] = to
        return data


#: The longest idle time "Retire idle consumers" takes: 365 days.
MAX_IDLE_MS = 365 * 86_400_000
_IDLE = re.compile(r"\A(\d{1,9})\s*(s|m|min|h|d)?\Z")
_IDLE_UNITS = {"s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def idle_parse(text: str) -> int:
    """An idle time as an operator types it: ``90s``, ``30m`` (or ``30min``), ``2h``,
    ``1d``; a bare number is minutes. Returns ms; ValidationError otherwise."""
    match = _IDLE.match(text.strip().lower())
    if match is None:
        raise ValidationError(
            "idle must be a time such as 90s, 30m, 2h or 1d (a bare number is minutes)"
        )
    ms = int(match[1]) * _IDLE_UNITS[match[2] or "m"]
    if not 1000 <= ms <= MAX_IDLE_MS:
        raise ValidationError("idle must be between 1 s and 365 d")
    return ms


class IdleDryRunForm(TargetForm):
    """The dry run of Retire idle consumers: idle at least ``idle`` (``idle_parse``)."""

    idle = PostedText()

    def clean_idle(self) -> int:
        raw: str = self.cleaned_data["idle"]
        if not raw:
            raise ValidationError("idle is required: how long a consumer must have been idle")
        return idle_parse(raw)


class RetireIdleForm(IdleDryRunForm):
    """Retire idle consumers: those idle at least ``idle`` and holding nothing.
    ``names`` are the consumers its dry run listed; only those are retired, each
    re-checked (still idle, pending 0, no live heartbeat)."""

    names = NameListField()

    def clean_names(self) -> list[str]:
        names: list[str] = self.cleaned_data["names"]
        if not names:
            raise ValidationError(
                "Name the consumers to retire (names): run the dry run first, which lists them."
            )
        for name in names:
            consumer_name_check(name)
        if len(names) > 1000:
            raise ValidationError("At most 1000 consumers at a time.")
        return list(dict.fromkeys(names))
