"""Frozen value types shared by the worker, selectors and services.

Raw Redis replies never leave ``queue_core``: selectors and services return these.
Sections are owned by the module named in their heading.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class PermanentFailure(Exception):  # noqa: N818 - the public name the issue asks for
    """Raised by a handler when retrying can never help: the entry is dead-lettered now."""


class UnparseableEntry(Exception):  # noqa: N818
    """Raised by a job parser: the entry is dead-lettered with this reason, never acked silently."""


class ActionRefused(Exception):  # noqa: N818
    """A service's guard refused the action; the message is shown to the operator as is."""


# --- worker (queue_core.worker) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    """One delivered stream entry, as a handler sees it.

    ``fields`` are decoded as UTF-8 by the default parser; ``raw`` keeps the exact bytes.
    ``delivery_count`` is the group's delivery counter for this entry (1 on first delivery).
    """

    stream: str
    group: str
    id: str
    fields: dict[str, str]
    delivery_count: int
    consumer: str
    raw: dict[bytes, bytes] = field(default_factory=dict, repr=False, compare=False)

    def json(self, name: str = "payload") -> Any:
        """The JSON value of field ``name``; a missing or malformed one is a PermanentFailure."""
        try:
            return json.loads(self.fields[name])
        except KeyError:
            raise PermanentFailure(f"field {name!r} is missing") from None
        except ValueError as exc:
            raise PermanentFailure(f"field {name!r} is not valid JSON: {exc}") from None


# --- selectors (queue_core.selectors) -------------------------------------------------


# --- services (queue_core.services) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """An entry moved to the dead-letter stream by ``entry_dead_letter``."""

    entry_id: str
    dlq_id: str
    consumer: str
    deliveries: int
    payload_missing: bool


@dataclass(frozen=True, slots=True)
class Retried:
    """An entry made due for redelivery in its own group by ``entry_retry``.

    Owner and delivery count are unchanged; only the idle time moved, from
    ``idle_before_ms`` to ``idle_ms``.
    """

    entry_id: str
    consumer: str
    deliveries: int
    idle_before_ms: int
    idle_ms: int


@dataclass(frozen=True, slots=True)
class Claimed:
    """An entry handed to ``consumer`` by ``entry_claim`` (a delivery: the count went up)."""

    entry_id: str
    consumer: str
    previous_consumer: str
    deliveries: int
    idle_before_ms: int


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """The outcome of ``entry_acknowledge``; owner and deliveries are the state before."""

    entry_id: str
    was_pending: bool
    consumer: str = ""
    deliveries: int = 0
    idle_ms: int = 0


@dataclass(frozen=True, slots=True)
class Replayed:
    """A dead-lettered entry put back on its stream for ``group`` only, by ``dlq_replay``."""

    dlq_id: str
    new_id: str
    group: str
    origin_id: str


@dataclass(frozen=True, slots=True)
class DeadLetterDeleted:
    """The outcome of ``dlq_delete``; origin fields are empty when nothing was deleted."""

    dlq_id: str
    deleted: bool
    origin_group: str = ""
    origin_id: str = ""


@dataclass(frozen=True, slots=True)
class DeadLettersPurged:
    """The outcome of ``dlq_purge``: how many dead-lettered entries were removed."""

    stream: str
    deleted: int


class BulkOutcome(StrEnum):
    """What a bulk action did to one id. The values are shown to operators as is."""

    DONE = "done"
    NOT_PENDING = "skipped-not-pending"
    NEWER_THAN_SNAPSHOT = "skipped-newer-than-snapshot"
    CHANGED = "skipped-changed"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class BulkScope:
    """One capped page of the ids a bulk action would touch (the dry run).

    ``next_cursor`` is the id to continue from, or None when the scope up to
    ``snapshot_id`` is exhausted. ``scanned`` counts the pending rows read.
    """

    snapshot_id: str
    ids: tuple[str, ...]
    scanned: int
    next_cursor: str | None

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def complete(self) -> bool:
        return self.next_cursor is None


@dataclass(frozen=True, slots=True)
class BulkItem:
    """One id's outcome in a bulk action; ``detail`` says why when it was not done.

    ``new_id`` is the dead-letter id when a bulk dead-letter moved the entry.
    """

    entry_id: str
    outcome: BulkOutcome
    detail: str = ""
    new_id: str = ""


@dataclass(frozen=True, slots=True)
class BulkResult:
    """The outcome of one capped bulk request, and where the next request continues."""

    action: str
    snapshot_id: str
    items: tuple[BulkItem, ...]
    next_cursor: str | None

    @property
    def done(self) -> tuple[str, ...]:
        return tuple(i.entry_id for i in self.items if i.outcome is BulkOutcome.DONE)

    @property
    def skipped(self) -> tuple[BulkItem, ...]:
        return tuple(i for i in self.items if i.outcome is not BulkOutcome.DONE)

    @property
    def complete(self) -> bool:
        return self.next_cursor is None
