"""Every Redis key and channel name Ackboard uses is built here, and only here.

Companion keys (the dead-letter stream and the failure log) must hash to the same
Redis Cluster slot as their stream, so that one Lua script can touch both atomically
on a cluster too. This module decides the names and refuses, with a clear error,
names that cannot share a slot. It never falls back to a non-atomic layout.

No two streams share a companion, and a companion is never taken for a stream: the
allowlist decides what the dashboard shows by stream name, so one key reachable under
two names would let an allowed name reach a hidden stream's keys.
``stream_visible`` is the one check every dashboard entry point makes.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from redis.crc import key_slot

#: Every companion name ends with one of these, so ``SCAN MATCH *:failures`` finds them all.
DLQ_SUFFIX = ":dlq"
FAILURES_SUFFIX = ":failures"
COMPANION_SUFFIXES = (DLQ_SUFFIX, FAILURES_SUFFIX)
#: Between a hash-tagged stream's name and its companion suffix: ``{t}orders:ackboard:dlq``.
#: Without it ``{X}:dlq`` would be the DLQ of both ``X`` and ``{X}`` (see ``stream_keys``).
TAGGED_MARKER = ":ackboard"

#: Fleet-control keys (not streams; never listed by discovery, which SCANs TYPE stream):
#: ``{orders}:pause:<group>`` and ``{orders}:workers:<group>``, in the stream's slot.
PAUSE_INFIX = ":pause:"
WORKERS_INFIX = ":workers:"
#: Retry later's due times, per group: ``{orders}:later:<group>``, in the stream's slot;
#: and the set of (stream, group) pairs that may have any, which the sweepers read (not a
#: companion: it names groups of any slot).
LATER_INFIX = ":later:"
LATER_INDEX_KEY = "ackboard:later"
#: Edit & replay's records, beside the DLQ: ``{orders}:dlq-edits``; and the set of streams
#: that have any, which the sweep reads (not a companion: it names streams, any slot).
DLQ_EDITS_SUFFIX = ":dlq-edits"
DLQ_EDITS_INDEX_KEY = "ackboard:dlq-edits"
#: The rates sampler's lease (one sampler writes at a time); settings may rename it.
RATES_SAMPLER_LEASE_KEY = "ackboard:rates:sampler"
#: The alert sender's one-per-deployment lease (``manage.py send_alerts``), and its state:
#: one hash of when each rule's condition began and when each webhook was last sent each
#: breach (``dashboard.alerts.sender``), so a restart or a new lease holder resends nothing.
#: ``ACKBOARD_ALERTS_KEY`` replaces the ``ackboard:alerts`` they share (one per deployment).
ALERTS_KEY = "ackboard:alerts"
ALERTS_LEASE_KEY = ALERTS_KEY + ":sender"
ALERTS_STATE_KEY = ALERTS_KEY + ":state"

#: Pub/sub channel on which workers and operator actions announce changes.
#: Pub/sub is cluster-wide, so a fixed name is fine.
EVENTS_CHANNEL = "ackboard:events"

#: Field names with this prefix are reserved for Ackboard's own metadata.
RESERVED_PREFIX = "ackboard."
#: A replayed entry carries the one group it is meant for; workers of other groups
#: acknowledge it without running their handler (see docs/ack-contract.md, "Guarantees").
REPLAY_GROUP_FIELD = RESERVED_PREFIX + "replay-group"
REPLAY_OF_FIELD = RESERVED_PREFIX + "replay-of"

#: The metadata a dead-lettered entry carries after its own fields. ``dead_letter.lua``
#: writes them in the order of ``DEAD_LETTER_FIELDS`` and the scripts get every name
#: through ARGV, so this is their one spelling. Stored entries depend on it: renaming or
#: reordering one changes what is on disk.
ORIGIN_STREAM_FIELD = RESERVED_PREFIX + "origin-stream"
ORIGIN_GROUP_FIELD = RESERVED_PREFIX + "origin-group"
ORIGIN_ID_FIELD = RESERVED_PREFIX + "origin-id"
CONSUMER_FIELD = RESERVED_PREFIX + "consumer"
DELIVERIES_FIELD = RESERVED_PREFIX + "deliveries"
LAST_ERROR_FIELD = RESERVED_PREFIX + "last-error"
REASON_FIELD = RESERVED_PREFIX + "reason"
OPERATOR_FIELD = RESERVED_PREFIX + "operator"
DEAD_LETTERED_AT_FIELD = RESERVED_PREFIX + "dead-lettered-at"
PAYLOAD_MISSING_FIELD = RESERVED_PREFIX + "payload-missing"
DEAD_LETTER_FIELDS = (
    ORIGIN_STREAM_FIELD,
    ORIGIN_GROUP_FIELD,
    ORIGIN_ID_FIELD,
    CONSUMER_FIELD,
    DELIVERIES_FIELD,
    LAST_ERROR_FIELD,
    REASON_FIELD,
    OPERATOR_FIELD,
    DEAD_LETTERED_AT_FIELD,
    PAYLOAD_MISSING_FIELD,
)

#: Longest stream name the dashboard accepts in a URL (Redis allows 512 MB; people do not).
MAX_NAME_LENGTH = 1024


class CrossSlotName(ValueError):
    """The stream's companions cannot share its cluster slot, so atomic moves are refused."""


def hash_tag(name: str) -> str | None:
    """The part of ``name`` that Redis Cluster hashes, when it is a hash tag.

    Cluster rule: the first ``{`` and the first ``}`` after it; a tag only when the
    text between them is non-empty. Returns None when the whole key is hashed.
    """
    start = name.find("{")
    if start == -1:
        return None
    end = name.find("}", start + 1)
    if end == -1 or end == start + 1:
        return None
    return name[start + 1 : end]


def _hashed_part(name: str) -> str:
    tag = hash_tag(name)
    return name if tag is None else tag


@dataclass(frozen=True, slots=True)
class StreamKeys:
    """A stream and its companion keys, all in one cluster slot."""

    stream: str
    dlq: str
    failures: str

    @property
    def slot(self) -> int:
        return key_slot(self.stream.encode())

    @property
    def _base(self) -> str:
        # ``{orders}`` or ``{t}orders:ackboard``: the dlq's name without its suffix.
        return self.dlq[: -len(DLQ_SUFFIX)]

    def pause(self, group: str) -> str:
        """The pause of ``group`` (fleet control): a string holding the pause as JSON,
        with ``PXAT`` set when it resumes by itself. In the stream's slot, so it survives
        what the stream survives and a script may read it with the stream."""
        return self._base + PAUSE_INFIX + group

    def workers(self, group: str) -> str:
        """The heartbeats of ``group``'s Ackboard workers: a hash, consumer name -> the
        worker's last heartbeat as JSON. Its TTL is renewed by each heartbeat, so a group
        whose workers are all gone loses it by itself. In the stream's slot."""
        return self._base + WORKERS_INFIX + group

    def later(self, group: str) -> str:
        """Retry later's due times of ``group``: a sorted set, entry id -> the epoch ms it
        is due at (``queue_core.later``). In the stream's slot, so one script parks an
        entry and records its due time atomically."""
        return self._base + LATER_INFIX + group

    @property
    def dlq_edits(self) -> str:
        """Edit & replay's records of the stream's dead letters: a hash, dead-letter id ->
        the replay's state as JSON. In the stream's slot."""
        return self._base + DLQ_EDITS_SUFFIX


def stream_keys(stream: str) -> StreamKeys:
    """Companion key names for ``stream``.

    ``orders`` -> ``{orders}:dlq``, ``{orders}:failures``. A stream that already has a
    hash tag keeps it, and its companions carry a marker: ``{tenant1}orders`` ->
    ``{tenant1}orders:ackboard:dlq``, ``{tenant1}orders:ackboard:failures``.

    Why the marker: untagged names give ``"{" + S + "}" + A`` (S has no ``}``, else the slot
    check below refuses it) and tagged ones ``T + B``. Equal names need the same kind
    suffix (``:dlq`` is not a suffix of ``:failures``), then ``"{" + S + "}" == T + R``
    where ``B == R + A``. With ``R = ":ackboard"`` the left side ends in ``}`` and the
    right in ``d``, so no two streams ever share a companion, whatever their names. With
    no marker (``R = ""``), ``{X}`` and ``X`` shared ``{X}:dlq``.

    Raises CrossSlotName when no such layout shares the stream's slot, e.g. ``a}b``.
    """
    if not stream:
        raise CrossSlotName("stream name is empty")
    base = "{" + stream + "}" if hash_tag(stream) is None else stream + TAGGED_MARKER
    keys = StreamKeys(stream=stream, dlq=base + DLQ_SUFFIX, failures=base + FAILURES_SUFFIX)
    # Compare the hashed text itself, which is stricter than comparing slot numbers.
    want = _hashed_part(stream)
    for companion in (keys.dlq, keys.failures):
        if _hashed_part(companion) != want:
            raise CrossSlotName(
                f"stream {stream!r} cannot share a cluster slot with its companion "
                f"{companion!r}; rename it (avoid '}}' without a matching '{{', or give it "
                "a hash tag such as '{orders}')"
            )
    return keys


def companion_parent(name: str) -> str | None:
    """The stream that ``name`` is a companion of, or None when it is not a companion.

    Exact: it returns ``S`` only when ``name`` is ``stream_keys(S).dlq`` or ``.failures``.
    Every companion is also a valid stream name (``{orders}:dlq`` can be XADDed to), so
    whoever opens a stream by name must ask this first; ``stream_visible`` does. Pure
    string work, no round trip.
    """
    for suffix in COMPANION_SUFFIXES:
        if not name.endswith(suffix):
            continue
        base = name[: -len(suffix)]
        # The two shapes stream_keys builds; at most one fits (``}`` vs the marker's end).
        if base.endswith(TAGGED_MARKER):
            parent = base[: -len(TAGGED_MARKER)]
        elif base.startswith("{") and base.endswith("}"):
            parent = base[1:-1]
        else:
            continue
        try:
            keys = stream_keys(parent)
        except CrossSlotName:
            continue
        if name in (keys.dlq, keys.failures):
            return parent
    return None


def parse_allowlist(raw: str | None) -> tuple[str, ...]:
    """``ACKBOARD_STREAMS`` is a comma-separated list of glob patterns; empty means ``*``."""
    patterns = tuple(p.strip() for p in (raw or "").split(",") if p.strip())
    return patterns or ("*",)


def allowed(name: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``name`` matches one of the allowlist glob patterns (Redis MATCH syntax)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def stream_visible(name: str, patterns: tuple[str, ...]) -> bool:
    """Whether the dashboard may open ``name`` as a stream: the one check for every page,
    action, bulk request, socket, discovery and the failure index.

    The allowlist must admit the name, and the name must not be another stream's
    companion: a companion is shown under its own stream, and only when that stream is
    visible. Because companions of distinct streams never coincide (``stream_keys``), a
    visible name reaches only its own keys, never a hidden stream's.
    """
    return allowed(name, patterns) and companion_parent(name) is None
