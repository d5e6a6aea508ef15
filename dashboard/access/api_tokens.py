"""Per-user API tokens: issue, authenticate, revoke.

A token reads ``ackb_<key_id>_<secret>``: ``key_id`` (12 hex characters) is public and
finds the row; ``secret`` (32 random bytes, url-safe) is never stored. The row keeps the
SHA-256 of the whole token, and the check compares hashes with ``hmac.compare_digest``,
so the answer's timing says nothing about how much of a guess was right. A plain hash
(not a slow password hash) is enough because the secret has 256 bits of entropy: there is
nothing to brute-force. The token is shown once, when it is issued (by the admin or
``manage.py ackboard token issue``); a lost token is revoked and a new one issued.

Owns the ApiToken rows' life. It never decides what a token's user may do (their Django
permissions do, checked by the action runner) and never touches Redis. Costs: one
indexed SELECT per authentication, plus an UPDATE of ``last_used_at`` at most once a
minute per token.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta

from django.contrib.auth.models import User

from dashboard.models import ApiToken
from queue_core import clock

PREFIX = "ackb_"
_TOKEN = re.compile(r"\Aackb_(?P<key_id>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{43})\Z")
#: ``last_used_at`` is written at most this often per token: one UPDATE per request
#: would make every API call a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_issue(*, user: User, name: str) -> tuple[ApiToken, str]:
    """A new token for ``user``: the row, and the token itself (shown once, never stored)."""
    key_id = secrets.token_hex(6)
    while ApiToken.objects.filter(key_id=key_id).exists():  # 48 bits: practically never
        key_id = secrets.token_hex(6)
    token = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    row = ApiToken.objects.create(
        user=user, name=name.strip()[:100] or "api", key_id=key_id, secret_hash=_digest(token)
    )
    return row, token


def token_authenticate(token: str) -> ApiToken | None:
    """The live token ``token`` is, with its user; None when it is malformed, unknown,
    revoked, or its user is inactive. One SELECT, and an UPDATE at most once a minute."""
    match = _TOKEN.match(token)
    if match is None:
        return None
    row = ApiToken.objects.select_related("user").filter(key_id=match["key_id"]).first()
    if row is None or not hmac.compare_digest(row.secret_hash, _digest(token)):
        return None
    if row.revoked_at is not None or not row.user.is_active:
        return None
    now = clock.now_utc()
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        row.last_used_at = now
    return row


def token_revoke(*, key_id: str) -> ApiToken | None:
    """Revoke the token ``key_id`` (idempotent: the first revocation time is kept).
    None when there is no such token."""
    row = ApiToken.objects.filter(key_id=key_id).first()
    if row is None:
        return None
    if row.revoked_at is None:
        row.revoked_at = clock.now_utc()
        row.save(update_fields=["revoked_at"])
    return row
