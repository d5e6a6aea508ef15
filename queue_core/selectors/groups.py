"""One consumer group's page: its header (``group_detail``: the stream's facts, the group,
its consumers and its XPENDING summary) and ``group_page``, which reads the header, the
first pending page (``pending``) and the caller's own commands in one round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis

from queue_core.connection import Client
from queue_core.errors import not_a_group
from queue_core.selectors._common import (
    _NO_KEY,
    _companions,
    _consumer_info,
    _first_id,
    _group_info,
    _id_after,
    _may_wait,
    _missing,
    _ms_or_none,
    _pending_summary,
    _raise_transport,
    _stream_info,
    _text,
    _undelivered_after,
)
from queue_core.selectors.pending import (
    PENDING_PAGE_SIZE,
    _pending_page_finish,
    _pending_plain_finish,
    _pending_plain_queue,
    pending_page,
)
from queue_core.types import GroupDetail, PendingPage


def group_detail(*, client: Client, stream: str, group: str) -> GroupDetail | None:
    """The group page's header: one round trip of XINFO STREAM, XINFO GROUPS, XINFO
    CONSUMERS (O(consumers)), the XPENDING summary and two XLENs. None when the stream
    or the group does not exist. A second round trip only when the stream holds entries
    after the group's last-delivered id: ``XRANGE … COUNT 1`` (O(log n)) for the first
    one, whose id says how long work has waited (health, when nothing is pending) and is
    the lag in time (``oldest_undelivered_ms``)."""
    pipe = client.pipeline(transaction=False)
    _group_detail_queue(pipe, stream, group)
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    return _group_detail_finish(client, stream, group, replies)


def _group_detail_queue(pipe: Any, stream: str, group: str) -> int:
    """Adds ``group_detail``'s commands to ``pipe``; returns how many."""
    companions = _companions(stream)
    pipe.xinfo_stream(stream)
    pipe.xinfo_groups(stream)
    pipe.xinfo_consumers(stream, group)
    pipe.xpending(stream, group)
    pipe.xlen(companions[0] if companions else _NO_KEY)
    pipe.xlen(companions[1] if companions else _NO_KEY)
    return 6


def _group_detail_finish(
    client: Client, stream: str, group: str, replies: Sequence[Any]
) -> GroupDetail | None:
    info, groups_raw, consumers_raw, summary, dlq_len, failures_len = replies
    if _missing(info) or _missing(consumers_raw) or _missing(summary):
        return None
    found = [g for g in groups_raw if _text(g.get("name")) == group]
    if not found:
        return None
    stream_info = _stream_info(stream, info, dlq_len, failures_len)
    group_info = _group_info(found[0])
    undelivered_id = None
    if _undelivered_after(stream_info, group_info):
        undelivered_id = _first_id(
            client.xrange(stream, min=_id_after(group_info.last_delivered_id), max="+", count=1)
        )
        group_info = replace(group_info, oldest_undelivered_ms=_ms_or_none(undelivered_id))
    waiting_id = undelivered_id if _may_wait(group_info, stream_info.length) else None
    pending, oldest_pending_id, newest_pending_id = _pending_summary(summary)
    return GroupDetail(
        stream=stream_info,
        group=group_info,
        consumers=tuple(_consumer_info(c) for c in consumers_raw),
        pending=pending,
        oldest_pending_id=oldest_pending_id,
        newest_pending_id=newest_pending_id,
        waiting_id=waiting_id,
        oldest_undelivered_ms=group_info.oldest_undelivered_ms,
    )


@dataclass(frozen=True, slots=True)
class GroupPage:
    """``group_page``'s reads: the header, the pending page (None for either: no such
    stream or group) and the raw replies of the caller's own commands, in order."""

    detail: GroupDetail | None
    page: PendingPage | None
    also: list[Any]


def group_page(
    *,
    client: Client,
    stream: str,
    group: str,
    start: str | None = None,
    consumer: str | None = None,
    min_idle_ms: int = 0,
    also: Callable[[Any], int] | None = None,
) -> GroupPage:
    """``group_detail`` and ``pending_page`` in one round trip, with ``also``'s commands
    (a function that adds read commands of the stream's slot to the pipeline and returns
    how many: the fleet's pause and heartbeats) in the same one; their raw replies, errors
    included, come back in ``GroupPage.also``. The follow-ups are each read's own: the
    first undelivered entry when the group lags, the payloads of sparse pending rows, and
    the idle filter's windows (read after, as ``pending_page`` does). ``page`` is None
    when ``detail`` is."""
    cursor = _id_after(start) if start else "-"
    plain = min_idle_ms <= 0
    pipe = client.pipeline(transaction=False)
    detail_n = _group_detail_queue(pipe, stream, group)
    pending_n = (
        _pending_plain_queue(pipe, stream, group, cursor, PENDING_PAGE_SIZE, consumer, True)
        if plain
        else 0
    )
    also_n = also(pipe) if also is not None else 0
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    head, rest = replies[:detail_n], replies[detail_n:]
    extra = list(rest[pending_n : pending_n + also_n])
    detail = _group_detail_finish(client, stream, group, head)
    if detail is None:
        return GroupPage(None, None, extra)
    if not plain:
        page = pending_page(
            client=client, stream=stream, group=group, start=start, consumer=consumer,
            min_idle_ms=min_idle_ms,
        )  # fmt: skip
        return GroupPage(detail, page, extra)
    try:
        scan = _pending_plain_finish(rest[:pending_n], PENDING_PAGE_SIZE, True)
    except redis.ResponseError as exc:
        if not_a_group(exc):
            return GroupPage(detail, None, extra)
        raise
    return GroupPage(detail, _pending_page_finish(client, stream, start, scan, True), extra)
