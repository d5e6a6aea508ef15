"""queue_core.bulk's caller filter (``match``): kept per window of pending ids, with the
snapshot, the limit's cursor, the scan cap and the scripts' own guards unchanged. The
dashboard's fingerprint scope is one such filter (tests/dashboard/test_causes.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import redis

from queue_core.bulk import bulk_acknowledge, bulk_scope, pending_ids_matching
from tests.factories import make_pending


class Every:
    """Keeps the ids in ``keep`` of those it is shown, and records each window's size."""

    def __init__(self, keep: set[str]) -> None:
        self.keep = keep
        self.windows: list[int] = []

    def __call__(self, ids: Sequence[str]) -> list[str]:
        self.windows.append(len(ids))
        return [i for i in ids if i in self.keep]


def test_match_keeps_only_what_it_returns(r: redis.Redis, stream: str) -> None:
    ids = make_pending(r, stream, "g", "c1", 10)
    match = Every(set(ids[::3]))
    found = bulk_scope(client=r, stream=stream, group="g", snapshot_id=ids[-1], match=match)
    assert list(found.ids) == ids[::3] and found.complete
    assert match.windows == [10]


def test_match_is_asked_once_per_window_and_limit_gives_a_cursor(
    r: redis.Redis, stream: str
) -> None:
    ids = make_pending(r, stream, "g", "c1", 25)
    match = Every(set(ids[::2]))
    first = pending_ids_matching(
        client=r, stream=stream, group="g", snapshot_id=ids[-1], limit=4, window=10,
        max_scan=20, match=match,
    )  # fmt: skip
    assert list(first.ids) == ids[0:8:2] and first.next_cursor is not None
    assert match.windows == [10]
    rest = pending_ids_matching(
        client=r, stream=stream, group="g", snapshot_id=ids[-1], start_id=first.next_cursor,
        limit=100, window=10, max_scan=30, match=match,
    )  # fmt: skip
    assert list(rest.ids) == ids[8::2] and rest.complete


def test_match_with_explicit_ids_is_refused(r: redis.Redis, stream: str) -> None:
    ids = make_pending(r, stream, "g", "c1", 2)
    with pytest.raises(ValueError, match="not both"):
        bulk_scope(
            client=r, stream=stream, group="g", snapshot_id=ids[-1], ids=ids, match=Every(set())
        )


def test_apply_acts_only_on_matched_ids(r: redis.Redis, stream: str) -> None:
    ids = make_pending(r, stream, "g", "c1", 6)
    result = bulk_acknowledge(
        client=r, stream=stream, group="g", snapshot_id=ids[-1], reason="fixed",
        match=Every({ids[1], ids[4]}),
    )  # fmt: skip
    assert sorted(result.done) == sorted([ids[1], ids[4]])
    left = [p["message_id"].decode() for p in r.xpending_range(stream, "g", "-", "+", 10)]
    assert left == [ids[0], ids[2], ids[3], ids[5]]
