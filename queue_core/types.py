"""Frozen value types shared by the worker, selectors and services.

Raw Redis replies never leave ``queue_core``: selectors and services return these.
Sections are owned by the module named in their heading.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
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
