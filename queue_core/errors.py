"""Redis error replies, read in one place.

Redis answers an error with text: a code word (``NOGROUP``, ``BUSYGROUP``, ``WRONGTYPE``…)
then a message. Inside a Lua script the same reply arrives wrapped: Redis 7 appends
``script: <sha>, on @user_script:12.``, Redis 6 prefixes ``Error running script (call to
f_<sha>): @user_script:12:``. This module is the only code that reads that text. It
answers questions about one error (is it a missing group?) and turns the errors an
operator can cause into the core's exceptions; everything else asks it.

It never talks to Redis, never retries, and never hides an error it does not know: an
unknown reply stays a ``redis.ResponseError``, so a bug stays loud. Pure string work, no
round trip. Connection errors and timeouts are told apart by their class, not here.
"""

from __future__ import annotations

import re

import redis

from queue_core.types import ActionRefused

#: The code word at the start of a reply, or after the ``: `` of Redis 6's script wrapper.
_CODE = re.compile(r"(?:\A|: )([A-Z]+) ")
#: Redis's replies to a malformed or out-of-range stream id (XRANGE, XPENDING, XCLAIM,
#: XADD…): "Invalid stream ID specified as stream command argument", "invalid start ID
#: for the interval".
_INVALID_ID = re.compile(r"\binvalid\b.*\bID\b", re.IGNORECASE)
#: XGROUP CREATE without MKSTREAM on a key that does not exist (no code word: ``ERR``,
#: which redis-py strips).
_KEY_REQUIRED = "requires the key to exist"


def error_code(exc: redis.ResponseError) -> str:
    """The reply's code word (``NOGROUP``, ``WRONGTYPE``…), or ``""`` when it has none.

    Found at the start of the text or after a script wrapper's ``: ``, so a code word
    that only appears inside a quoted name is never taken for the reply's code.
    """
    match = _CODE.search(str(exc))
    return match[1] if match else ""


def group_missing(exc: redis.ResponseError) -> bool:
    """NOGROUP: the consumer group, or the stream itself, does not exist."""
    return error_code(exc) == "NOGROUP"


def group_exists(exc: redis.ResponseError) -> bool:
    """BUSYGROUP: XGROUP CREATE of a group that is already there (usually fine)."""
    return error_code(exc) == "BUSYGROUP"


def wrong_type(exc: redis.ResponseError) -> bool:
    """WRONGTYPE: the key holds something other than a stream."""
    return error_code(exc) == "WRONGTYPE"


def not_a_group(exc: redis.ResponseError) -> bool:
    """NOGROUP or WRONGTYPE: there is no such group to read, whatever the key holds.

    What a selector answers None for and a page shows as 404; never an outage.
    """
    return error_code(exc) in ("NOGROUP", "WRONGTYPE")


def key_missing(exc: redis.ResponseError) -> bool:
    """XGROUP CREATE without MKSTREAM found no key (deleted since it was seen)."""
    return _KEY_REQUIRED in str(exc)


def invalid_id(exc: redis.ResponseError) -> bool:
    """Redis rejected a stream id the request carried: the caller's fault, not an outage."""
    return _INVALID_ID.search(str(exc)) is not None


def action_refusal(exc: redis.ResponseError, *, stream: str, group: str = "") -> ActionRefused:
    """The readable refusal for a Redis error an operator can cause; re-raises any other.

    A missing group (NOGROUP) and a key that is not a stream (WRONGTYPE) are refusals:
    Redis ran nothing, and the operator can see why. Raise the result ``from exc`` so
    callers can tell a refusal Redis gave (``__cause__``) from a guard's.
    """
    code = error_code(exc)
    if code == "NOGROUP":
        return ActionRefused(f"there is no consumer group {group!r} on stream {stream!r}")
    if code == "WRONGTYPE":
        return ActionRefused(f"{stream!r} is not a stream")
    raise exc
