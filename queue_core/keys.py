"""Every Redis key and channel name Ackboard uses is built here, and only here.

Companion keys (the dead-letter stream and the failure log) must hash to the same
Redis Cluster slot as their stream, so that one Lua script can touch both atomically
on a cluster too. This module decides the names and refuses, with a clear error,
names that cannot share a slot. It never falls back to a non-atomic layout.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from redis.crc import key_slot

DLQ_SUFFIX = ":dlq"
FAILURES_SUFFIX = ":failures"
COMPANION_SUFFIXES = (DLQ_SUFFIX, FAILURES_SUFFIX)

#: Pub/sub channel on which workers and operator actions announce changes.
#: Pub/sub is cluster-wide, so a fixed name is fine.
EVENTS_CHANNEL = "ackboard:events"

#: Field names with this prefix are reserved for Ackboard's own metadata.
RESERVED_PREFIX = "ackboard."
#: A replayed entry carries the one group it is meant for; workers of other groups
#: acknowledge it without running their handler (see README, "Replay").
REPLAY_GROUP_FIELD = RESERVED_PREFIX + "replay-group"
REPLAY_OF_FIELD = RESERVED_PREFIX + "replay-of"

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


def stream_keys(stream: str) -> StreamKeys:
    """Companion key names for ``stream``.

    ``orders`` -> ``{orders}:dlq``, ``{orders}:failures``; a stream that already has a
    hash tag keeps it: ``{tenant1}orders`` -> ``{tenant1}orders:dlq``.

    Raises CrossSlotName when no such layout shares the stream's slot, e.g. ``a}b``.
    """
    if not stream:
        raise CrossSlotName("stream name is empty")
    base = stream if hash_tag(stream) is not None else "{" + stream + "}"
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
    """The stream that ``name`` is a companion of, or None when it is not a companion."""
    for suffix in COMPANION_SUFFIXES:
        if not name.endswith(suffix):
            continue
        base = name[: -len(suffix)]
        candidates = [base]
        if base.startswith("{") and base.endswith("}"):
            candidates.insert(0, base[1:-1])
        for parent in candidates:
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
