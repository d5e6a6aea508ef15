"""The action forms on their own: what each accepts, what it refuses and in which order.

Pure parsing (no Redis, no database): the HTTP behaviour is in test_actions.py and
test_bulk.py.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.http import QueryDict
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.views.bulk import BulkForm
from dashboard.views.forms import (
    AcknowledgeForm,
    ActionForm,
    ClaimForm,
    PostedText,
    PurgeForm,
    StreamIdField,
    WholeNumberField,
)


class PostedTextTests:
    def test_never_refuses_and_keeps_what_was_typed(self) -> None:
        field = PostedText()
        assert field.clean(None) == ""
        assert field.clean("  a\x00b  ") == "a\x00b"  # CharField would refuse the NUL
        assert PostedText(strip=False).clean("  x ") == "  x "
        assert field.clean("y" * 100_000) == "y" * 100_000


class WholeNumberFieldTests:
    def test_digits_only(self) -> None:
        field = WholeNumberField("seen_idle_ms")
        assert field.clean(" 007 ") == 7
        assert field.clean("") is None
        assert field.clean("9" * 15) == int("9" * 15)
        for bad in ("-1", "+5", "1.0", "1e3", "soon", "9" * 16, "1 2"):
            with pytest.raises(ValidationError) as refused:
                field.clean(bad)
            assert refused.value.messages == ["seen_idle_ms must be a whole number"], bad

    def test_required_names_the_field(self) -> None:
        with pytest.raises(ValidationError) as refused:
            WholeNumberField("expected_length", required=True).clean("  ")
        assert refused.value.messages == ["expected_length is required"]


class StreamIdFieldTests:
    def test_full_ids_trimmed_and_named_in_the_refusal(self) -> None:
        field = StreamIdField("cursor")
        assert field.clean(" 1-0 ") == "1-0"
        assert field.clean("") is None
        with pytest.raises(ValidationError) as refused:
            field.clean("1-")
        assert refused.value.messages[0].startswith("cursor '1-' is not a stream id")

    def test_a_required_one_says_what_is_missing(self) -> None:
        with pytest.raises(ValidationError) as refused:
            StreamIdField("snapshot id", missing="reload the page").clean("")
        assert refused.value.messages == ["reload the page"]


class ActionFormTests:
    def test_shared_fields_never_refuse_and_the_reason_is_cut(self) -> None:
        form = ActionForm({"reason": "  why " + "x" * 3000, "place": "elsewhere"})
        assert form.is_valid() and form.problem() is None
        assert form.cleaned_data["reason"] == ("why " + "x" * 3000)[:2000]
        assert (form.cleaned_data["place"], form.cleaned_data["next"]) == ("elsewhere", "")

    def test_acknowledge_needs_a_reason(self) -> None:
        form = AcknowledgeForm({"reason": "   "})
        assert form.problem() == (
            "Acknowledge needs a reason: say why this entry may be discarded."
        )
        assert "reason" not in form.cleaned_data


class ClaimFormTests:
    def test_blank_consumer_is_the_operator_consumer(self, settings: SettingsWrapper) -> None:
        settings.ACKBOARD_OPERATOR_CONSUMER = "ops"
        form = ClaimForm({"seen_idle_ms": "10", "consumer": "  "})
        assert form.problem() is None
        data = form.cleaned_data
        assert (data["consumer"], data["seen_idle_ms"], data["seen_deliveries"]) == (
            "ops",
            10,
            None,
        )

    def test_first_problem_in_declared_order(self) -> None:
        form = ClaimForm({"consumer": "c" * 256, "seen_deliveries": "x"})
        assert form.problem() == "consumer name is longer than 255 characters"
        assert ClaimForm({"seen_deliveries": "x"}).problem() == "seen_idle_ms is required"
        form = ClaimForm({"seen_idle_ms": "1", "seen_deliveries": "x"})
        assert form.problem() == "seen_deliveries must be a whole number"


class PurgeFormTests:
    def test_the_typed_name_must_match_exactly(self) -> None:
        typed = PurgeForm({"confirm_name": " orders", "expected_length": "3"}, stream="orders")
        assert typed.problem() == "Type the stream's name exactly to confirm the purge."
        ok = PurgeForm({"confirm_name": "orders", "expected_length": "3"}, stream="orders")
        assert ok.problem() is None
        assert (ok.cleaned_data["expected_length"], ok.cleaned_data["newest_id"]) == (3, None)

    def test_length_then_newest_id(self) -> None:
        form = PurgeForm({"confirm_name": "s", "newest_id": "x"}, stream="s")
        assert form.problem() == "expected_length is required"
        form = PurgeForm(
            {"confirm_name": "s", "expected_length": "1", "newest_id": "x"}, stream="s"
        )
        assert (form.problem() or "").startswith("newest dead-letter id 'x'")


class BulkFormTests:
    def test_the_scope_keeps_only_what_it_uses(self) -> None:
        data = {
            "snapshot_id": "5-0",
            "ids": ["1-0", " 2-0 ", ""],
            "consumer": "w1",
            "cursor": "1-0",
            "min_idle_ms": "1000",
        }
        selected = BulkForm(_post(data), cap=10)
        assert selected.problem() is None
        step = selected.step()
        assert (step.ids, step.consumer, step.cursor, step.min_idle_ms) == (
            ["1-0", "2-0"],
            None,
            None,
            None,
        )
        filtered = BulkForm(_post({**data, "scope": "filter", "confirm": "1"}), cap=10)
        assert filtered.problem() is None
        step = filtered.step()
        assert (step.ids, step.consumer, step.cursor, step.min_idle_ms) == (None, "w1", "1-0", 1000)
        assert step.confirm and (step.done_before, step.skipped_before) == (0, 0)

    def test_cap_and_reason(self) -> None:
        many = {"snapshot_id": "5-0", "ids": ["1-0", "2-0", "3-0"]}
        assert BulkForm(_post(many), cap=2).problem() == (
            "Select at most 2 entries, or use the filter scope."
        )
        needs = BulkForm(_post(many), cap=5, reason_missing="say why")
        assert needs.problem() == "say why"
        assert BulkForm(_post({**many, "reason": "dup"}), cap=5, reason_missing="x").is_valid()


def _post(data: dict[str, object]) -> QueryDict:
    """``data`` as Django parses a POST body (repeated fields as lists)."""
    post = QueryDict(mutable=True)
    for key, value in data.items():
        post.setlist(key, [str(v) for v in value] if isinstance(value, list) else [str(value)])
    return post
