"""Redis error replies, as real Redis sends them, read by the one module that reads them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from queue_core.errors import (
    action_refusal,
    error_code,
    group_exists,
    group_missing,
    invalid_id,
    key_missing,
    not_a_group,
    wrong_type,
)
from queue_core.types import ActionRefused
from tests.factories import make_group

#: The same XPENDING, sent directly and from inside a script (whose errors arrive wrapped).
_IN_SCRIPT = "return redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1)"


def reply_to(call: Callable[[], Any]) -> redis.ResponseError:
    with pytest.raises(redis.ResponseError) as refused:
        call()
    return refused.value


class ErrorCodeTests:
    def test_missing_group_directly_and_inside_a_script(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        for exc in (
            reply_to(lambda: r.xpending_range(stream, "nope", "-", "+", 1)),
            reply_to(lambda: r.eval(_IN_SCRIPT, 1, stream, "nope")),
            reply_to(lambda: r.xreadgroup("nope", "c", {stream: ">"})),
        ):
            assert error_code(exc) == "NOGROUP"
            assert group_missing(exc) and not_a_group(exc)
            assert not wrong_type(exc) and not group_exists(exc) and not invalid_id(exc)

    def test_missing_stream_is_a_missing_group(self, r: redis.Redis, stream: str) -> None:
        assert group_missing(reply_to(lambda: r.xpending_range(stream, "g", "-", "+", 1)))

    def test_wrong_type_directly_and_inside_a_script(self, r: redis.Redis, prefix: str) -> None:
        r.set(prefix + "plain", "x")
        for exc in (
            reply_to(lambda: r.xpending_range(prefix + "plain", "g", "-", "+", 1)),
            reply_to(lambda: r.eval(_IN_SCRIPT, 1, prefix + "plain", "g")),
        ):
            assert error_code(exc) == "WRONGTYPE"
            assert wrong_type(exc) and not_a_group(exc) and not group_missing(exc)

    def test_a_code_word_inside_a_name_is_not_the_reply_code(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, "g")
        exc = reply_to(lambda: r.xpending_range(stream, "x: WRONGTYPE y", "-", "+", 1))
        assert "WRONGTYPE" in str(exc)
        assert error_code(exc) == "NOGROUP" and not wrong_type(exc)

    def test_group_that_exists_and_key_that_does_not(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        busy = reply_to(lambda: r.xgroup_create(stream, "g", id="0"))
        assert group_exists(busy) and not group_missing(busy) and not key_missing(busy)
        absent = reply_to(lambda: r.xgroup_create(stream + "-gone", "g", id="0"))
        assert key_missing(absent) and not group_exists(absent) and error_code(absent) == ""

    def test_invalid_ids(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        assert invalid_id(reply_to(lambda: r.xrange(stream, "x", "+")))
        last = "(18446744073709551615-18446744073709551615"  # nothing can come after it
        assert invalid_id(reply_to(lambda: r.xpending_range(stream, "g", last, "+", 1)))
        assert not invalid_id(reply_to(lambda: r.xpending_range(stream, "nope", "-", "+", 1)))


class ActionRefusalTests:
    def test_missing_group_and_wrong_type_become_refusals(
        self, r: redis.Redis, stream: str, prefix: str
    ) -> None:
        missing = reply_to(lambda: r.eval(_IN_SCRIPT, 1, stream, "g"))
        refusal = action_refusal(missing, stream=stream, group="g")
        assert type(refusal) is ActionRefused
        assert str(refusal) == f"there is no consumer group 'g' on stream {stream!r}"
        r.set(prefix + "plain", "x")
        other = reply_to(lambda: r.eval(_IN_SCRIPT, 1, prefix + "plain", "g"))
        assert str(action_refusal(other, stream="k")) == "'k' is not a stream"

    def test_any_other_error_stays_loud(self, r: redis.Redis) -> None:
        boom = reply_to(lambda: r.eval("error('boom')", 0))
        with pytest.raises(redis.ResponseError, match="boom"):
            action_refusal(boom, stream="s", group="g")
