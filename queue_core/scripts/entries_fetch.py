"""The binding of ``entries_fetch.lua``: the entries with given ids, in one run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queue_core.scripts.binding import LuaScript, ScriptCall, text
from queue_core.types import StreamEntry


class EntriesFetchScript(LuaScript[dict[str, StreamEntry]]):
    def call(self, *, stream: str, ids: Sequence[str]) -> ScriptCall[dict[str, StreamEntry]]:
        """The entries of ``stream`` with ``ids``, by id; trimmed or deleted ids are absent.

        Reads only. It blocks the server for one ``XRANGE id id`` per id (O(log n) each),
        so callers pass a page of ids, never an unbounded list."""
        return self.bind(keys=[stream], args=list(ids), parse=_parse, stream=stream)


def _parse(reply: Sequence[Any]) -> dict[str, StreamEntry]:
    """``{id, {field, value, …}, …}`` to entries by id (the id as text, fields as bytes)."""
    found: dict[str, StreamEntry] = {}
    pairs = iter(reply)
    for raw_id, flat in zip(pairs, pairs, strict=True):
        entry_id = text(raw_id)
        fields = tuple(zip(flat[::2], flat[1::2], strict=True))
        found[entry_id] = StreamEntry(id=entry_id, fields=fields)
    return found


ENTRIES_FETCH = EntriesFetchScript("entries_fetch")
