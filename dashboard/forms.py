"""What each operator action accepts: one Django form per action's POST.

Owns the parsing of the action forms (Retry, Claim, Dead-letter, Acknowledge, Replay,
Delete, Purge; bulk's form is ``dashboard.views.bulk.BulkForm``, built from the fields
here) and their refusals: a malformed form is a 400 whose message is the first problem
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
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

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
