"""What the services did: the frozen results of ``queue_core.services`` and
``queue_core.bulk``.

Each names the action's entry and the state before or after, for the audit record and
the operator's message. Pure values: no Redis, no I/O, never imports Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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
