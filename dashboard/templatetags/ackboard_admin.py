"""Template helpers of the group-administration controls (``dashboard/_admin.html``).

``{% last_reset stream group as reset %}`` is the newest successful Reset position of a
group, whose audit row keeps the position before: the group page offers Undo (the dry
run of a reset back there). One prepared SQL statement on an index, read only inside
the section of those who may administer the group; nothing here touches Redis or writes.
"""

from __future__ import annotations

from django import template

from dashboard.views.admin_actions import LastReset
from dashboard.views.admin_actions import last_reset as _last_reset

register = template.Library()


@register.simple_tag
def last_reset(stream: str, group: str) -> LastReset | None:
    """The newest successful reset of ``group`` (None when there is none)."""
    if not stream or not group:
        return None
    return _last_reset(stream=stream, group=group)
