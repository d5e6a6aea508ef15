"""Moves companion keys from an older naming to the current one (``queue_core.keys``).

Owns the one upgrade so far: hash-tagged streams' companions gained the ``:ackboard``
marker (``{t}orders:dlq`` -> ``{t}orders:ackboard:dlq``), so that stream ``X`` and stream
``{X}`` no longer share ``{X}:dlq``. Never deletes or overwrites a key: each move is one
``RENAMENX`` (same slot by construction, so it works on a cluster node too).

Cost: one ``SCAN … TYPE stream`` pass per companion suffix over the keyspace (O(keys),
run it once, at upgrade time), then one round trip per key moved or checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from queue_core.connection import Client
from queue_core.keys import COMPANION_SUFFIXES, CrossSlotName, companion_parent, hash_tag
from queue_core.keys import stream_keys as keys_of


@dataclass(frozen=True, slots=True)
class CompanionMove:
    """One old companion key and where it belongs now; ``note`` says why it is not moved."""

    old: str
    new: str | None
    note: str = ""


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def legacy_companions_find(*, client: Client, scan_count: int = 1000) -> list[CompanionMove]:
    """Old-style companions of hash-tagged streams, with their new names. Writes nothing."""
    moves: list[CompanionMove] = []
    for suffix in COMPANION_SUFFIXES:
        for raw in client.scan_iter(match="*" + suffix, count=scan_count, _type="stream"):
            old = _text(raw)
            base = old[: -len(suffix)]
            if hash_tag(base) is None:
                continue  # an untagged stream's companions never changed
            owner = companion_parent(old)
            if owner is not None:
                # "{S}:dlq" is stream S's current companion. It was also stream "{S}"'s old
                # one: only where a stream "{S}" exists can the key be either's.
                if base == "{" + owner + "}" and client.type(base) == b"stream":
                    note = (
                        f"now the companion of stream {owner!r}; "
                        f"if {base!r} owns it, RENAME it by hand"
                    )
                    moves.append(CompanionMove(old, None, note))
                continue
            try:
                new = getattr(keys_of(base), suffix.lstrip(":"))
            except CrossSlotName:
                continue
            moves.append(CompanionMove(old, new))
    return moves


def legacy_companions_rename(*, client: Client, moves: list[CompanionMove]) -> list[str]:
    """Apply ``moves`` with RENAMENX; returns one line per key saying what happened."""
    lines = []
    for move in moves:
        if move.new is None:
            lines.append(f"skipped {move.old!r}: {move.note}")
        elif client.renamenx(move.old, move.new):
            lines.append(f"renamed {move.old!r} -> {move.new!r}")
        else:
            lines.append(f"NOT renamed {move.old!r}: {move.new!r} exists; merge them by hand")
    return lines
