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

redis-py 8 strips the code word of the replies it knows (``READONLY``, ``MOVED``, ``ASK``,
``CLUSTERDOWN``…) from the text and keeps it as ``status_code``; ``error_code`` reads that
first, so a reply reads the same whichever client or parser raised it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
#: Replies that mean the server's place in the topology changed under the client: the slot
#: is served elsewhere (MOVED, ASK), the node is a replica now (READONLY), a failover or a
#: slot migration is under way (TRYAGAIN, CLUSTERDOWN, MASTERDOWN), or a blocked command was
#: cut short because the node changed role (UNBLOCKED, Redis 7 outside cluster mode).
_TOPOLOGY = frozenset(
    {"MOVED", "ASK", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "UNBLOCKED"}
)


def error_code(exc: redis.ResponseError) -> str:
    """The reply's code word (``NOGROUP``, ``WRONGTYPE``…), or ``""`` when it has none.

    Found at the start of the text or after a script wrapper's ``: ``, so a code word
    that only appears inside a quoted name is never taken for the reply's code.
    """
    status = getattr(exc, "status_code", None)
    if isinstance(status, str) and status and status != "ERR":
        return status  # redis-py 8 took it off the text (READONLY, MOVED, ASK…)
    match = _CODE.search(str(exc))
    return match[1] if match else ""


def topology_changed(exc: redis.ResponseError) -> bool:
    """The node no longer serves this command here: a redirect (MOVED, ASK), a replica
    (READONLY), a failover or migration under way (TRYAGAIN, CLUSTERDOWN, MASTERDOWN,
    UNBLOCKED). Never the command's own fault: reconnect (to the slot's owner, on a
    cluster, after a refresh of the slot map) and try again, with backoff.
    """
    return error_code(exc) in _TOPOLOGY


@dataclass(frozen=True, slots=True)
class Redirect:
    """A MOVED or ASK reply: ``slot`` is served at ``host``:``port``.

    ``ask`` is a one-command redirect during a slot migration (send ``ASKING`` first, and
    keep the slot map); MOVED is for good. ``host`` is ``""`` when Redis did not know
    it (``MOVED 12 :7001``): the same host as the connection that was answered.
    """

    ask: bool
    slot: int
    host: str
    port: int


def redirect(exc: redis.ResponseError) -> Redirect | None:
    """The MOVED or ASK redirect in ``exc``, or None for any other reply (or a malformed one)."""
    code = error_code(exc)
    if code not in ("MOVED", "ASK"):
        return None
    words = str(exc).split()
    if words and words[0] == code:
        words = words[1:]  # a raw reply: the client left the code word in the text
    if len(words) != 2:
        return None
    slot, address = words
    host, _, port = address.rpartition(":")
    if not (slot.isdigit() and port.isdigit()):
        return None
    return Redirect(ask=code == "ASK", slot=int(slot), host=host.strip("[]"), port=int(port))


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
