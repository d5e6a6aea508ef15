"""Template filters of Edit & replay (``dashboard.views.edit_replay``). Pure lookups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template

register = template.Library()


@register.filter
def edited_record(records: Mapping[str, Any] | None, dlq_id: str) -> Any:
    """The edited-replay record of ``dlq_id`` in the page's ``edited_replays``, or None."""
    return records.get(dlq_id) if records else None
