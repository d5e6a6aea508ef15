"""Template helpers for the operator-action includes, which the page views do not feed.

``{% entry_audit_events stream entry_id as events %}`` runs one indexed SQL query (see
``dashboard.audit.audit_for_entry``); ``{% operator_consumer %}`` is Claim's default
target. Nothing here touches Redis or writes anything.
"""

from __future__ import annotations

from django import template
from django.conf import settings

from dashboard.audit import audit_for_entry
from dashboard.models import AuditEvent

register = template.Library()


@register.simple_tag
def entry_audit_events(stream: str, entry_id: str, limit: int = 50) -> list[AuditEvent]:
    """The newest ``limit`` audit rows that touched ``entry_id`` of ``stream``."""
    if not stream or not entry_id:
        return []
    return audit_for_entry(stream=stream, entry_id=str(entry_id), limit=limit)


@register.simple_tag
def operator_consumer() -> str:
    """The consumer Claim hands entries to unless the operator names another."""
    return str(settings.ACKBOARD_OPERATOR_CONSUMER)
