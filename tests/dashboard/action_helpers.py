"""Helpers the action tests share (test_actions.py, test_bulk.py): URLs, reads, the last
audit row. Their fixtures (``make_client``, ``action_settings``) are in conftest.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from django.test import Client
from django.urls import reverse

from dashboard.models import AuditEvent

HTMX = {"HX-Request": "true"}

#: ``make_client(name="olga", *codenames)``: a logged-in client with those permissions
#: (every action's when none are named).
MakeClient = Callable[..., Client]


def entry_url(stream: str, entry_id: str, action: str, group: str = "g") -> str:
    return reverse("dashboard:entry-action", args=[stream, group, entry_id, action])


def dlq_url(stream: str, dlq_id: str, action: str) -> str:
    return reverse("dashboard:dlq-action", args=[stream, dlq_id, action])


def bulk_url(stream: str, action: str, group: str = "g") -> str:
    return reverse("dashboard:bulk-action", args=[stream, group, action])


def pending(r: redis.Redis, stream: str, entry_id: str, group: str = "g") -> dict[str, Any] | None:
    rows = r.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
    return rows[0] if rows else None


def pending_ids(r: redis.Redis, stream: str, group: str = "g") -> list[str]:
    rows = r.xpending_range(stream, group, min="-", max="+", count=1000)
    return [row["message_id"].decode() for row in rows]


def last_audit() -> AuditEvent:
    return AuditEvent.objects.order_by("-id")[0]
