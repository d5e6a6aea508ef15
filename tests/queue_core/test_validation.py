"""The input checks every service, selector, page and socket makes before Redis is asked."""

from __future__ import annotations

import pytest

from queue_core.validation import (
    MAX_IDLE_MS,
    MAX_REASON_LENGTH,
    count_check,
    entry_id_after,
    entry_id_check,
    entry_id_key,
    idle_check,
    name_check,
    reason_check,
)


class EntryIdTests:
    def test_valid_ids_pass(self) -> None:
        assert entry_id_check("0-0") == "0-0"
        assert entry_id_check("18446744073709551615-18446744073709551615")

    @pytest.mark.parametrize(
        "bad_id", ["", "abc", "1-", "-1", "1-2-3", "1.5-0", "18446744073709551616-0", " 1-0", "+"]
    )
    def test_malformed_ids_are_value_errors_that_say_what(self, bad_id: str) -> None:
        with pytest.raises(ValueError, match="^cursor .* is not a stream id"):
            entry_id_check(bad_id, what="cursor")

    def test_a_long_bad_value_is_not_echoed(self) -> None:
        with pytest.raises(ValueError, match="'that value' is not a stream id") as refused:
            entry_id_check("x" * 61)
        assert "xxxx" not in str(refused.value)

    def test_after_is_the_next_id(self) -> None:
        assert entry_id_after("5-1") == "5-2"
        assert entry_id_after("5-18446744073709551615") == "6-0"

    def test_ids_sort_as_numbers_not_text(self) -> None:
        assert entry_id_key("10-0") > entry_id_key("9-5")
        assert entry_id_key("9-10") > entry_id_key("9-9")


class ValueCheckTests:
    @pytest.mark.parametrize("value", ["", None, 3])
    def test_names_are_non_empty_strings(self, value: object) -> None:
        with pytest.raises(ValueError, match="group must be a non-empty string"):
            name_check(value, "group")

    def test_any_other_name_passes_as_is(self) -> None:
        assert name_check(" {t}orders ", "stream") == " {t}orders "

    @pytest.mark.parametrize("value", [-1, MAX_IDLE_MS + 1, True, 1.5])
    def test_idle_times_are_bounded_whole_numbers(self, value: int) -> None:
        with pytest.raises(ValueError, match="min_idle_ms must be a whole number of ms"):
            idle_check(value, "min_idle_ms")

    def test_idle_bounds_pass(self) -> None:
        assert idle_check(0, "idle") == 0 and idle_check(MAX_IDLE_MS, "idle") == MAX_IDLE_MS

    @pytest.mark.parametrize("value", [True, 1.0, "3"])
    def test_counts_are_whole_numbers(self, value: int) -> None:
        with pytest.raises(ValueError, match="expected_length must be a whole number"):
            count_check(value, "expected_length")

    def test_reasons_are_trimmed_and_cut(self) -> None:
        assert reason_check("  why  ", required=True) == "why"
        assert len(reason_check("x" * (MAX_REASON_LENGTH + 5), required=True)) == 2000
        assert reason_check("   ", required=False) == ""
        with pytest.raises(ValueError, match="a reason is required"):
            reason_check("   ", required=True)
        with pytest.raises(ValueError, match="reason must be text"):
            reason_check(None, required=False)
