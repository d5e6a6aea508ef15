"""What a handler sees and what the worker does with it: ``Job``, ``Outcome`` and the
two exceptions a handler or a job parser raises.

Frozen value types of ``queue_core.worker`` (``Delivery`` and ``Reclaimed`` are what its
reads and sweeps return). Pure values: no Redis, no I/O, never imports Django.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from queue_core.bounded_json import json_read

#: How deep ``Job.json`` reads by default: far deeper than payloads nest in practice, and
#: far enough from Python's recursion limit (1000 frames) for a handler's own stack.
JOB_JSON_MAX_DEPTH = 512


class PermanentFailure(Exception):  # noqa: N818 - the public name the issue asks for
    """Raised by a handler when retrying can never help: the entry is dead-lettered now."""


class UnparseableEntry(Exception):  # noqa: N818
    """Raised by a job parser: the entry is dead-lettered with this reason, never acked silently."""


# No __slots__: the worker builds each Job by filling its __dict__, about 3x faster than
# the frozen dataclass __init__ (one object.__setattr__ per field) on its hot path.
@dataclass(frozen=True)
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

    def json(
        self,
        name: str = "payload",
        *,
        max_depth: int = JOB_JSON_MAX_DEPTH,
        max_size: int | None = None,
    ) -> Any:
        """The JSON value of field ``name``; a missing or malformed one is a PermanentFailure,
        and so is one nested deeper than ``max_depth`` or longer than ``max_size``
        characters (None: any length), with the reason (``queue_core.bounded_json``)."""
        try:
            return json_read(self.fields[name], max_depth=max_depth, max_size=max_size)
        except KeyError:
            raise PermanentFailure(f"field {name!r} is missing") from None
        except ValueError as exc:
            raise PermanentFailure(f"field {name!r} is not valid JSON: {exc}") from None


class Outcome(StrEnum):
    """What ``process_entry`` did with one delivered entry."""

    ACKED = "acked"  # the handler returned; XACK sent
    FAILED = "failed"  # the handler raised; left pending, attempt recorded
    DEAD_LETTERED = "dead-lettered"  # moved to {S}:dlq and acked, atomically
    SKIPPED = "skipped"  # a replay meant for another group: acked without running
    NOT_PENDING = "not-pending"  # someone else acked, moved or took it first
    ACK_FAILED = "ack-failed"  # the handler returned but XACK failed (logged); still pending
    DEAD_LETTER_FAILED = "dead-letter-failed"  # due for the DLQ, but Redis failed or refused
    # the move (logged); still pending


@dataclass(frozen=True, slots=True)
class Delivery:
    """One entry delivered to a consumer: raw fields and the group's delivery count."""

    id: str
    fields: dict[bytes, bytes]
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """The outcome of one ``reclaim_stale`` call.

    ``deliveries`` are now owned by the consumer; ``deleted`` ids were trimmed while
    pending (recorded as PayloadMissing); ``cursor`` is where the next call starts
    (``0-0`` once the sweep wrapped around).
    """

    deliveries: tuple[Delivery, ...]
    deleted: tuple[str, ...]
    cursor: str
