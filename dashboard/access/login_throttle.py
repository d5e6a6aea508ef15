"""The client address the login throttle (django-axes) counts failed logins by.

Owns only the choice of address; axes does the counting, the lockout and the 429 page
(settings: ``AXES_*``). Never trusts an address the client could have written itself.
Costs nothing beyond reading two request headers.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.http import HttpRequest

from dashboard.access.sso_config import USERNAME_ATTR


def client_ip(request: HttpRequest) -> str | None:
    """The address a login attempt came from (``AXES_CLIENT_IP_CALLABLE``).

    Directly exposed, that is ``REMOTE_ADDR``. Behind N proxies (``DJANGO_BEHIND_PROXY``,
    ``DJANGO_PROXY_COUNT``), ``REMOTE_ADDR`` is the nearest proxy and each proxy appends
    the address it saw to ``X-Forwarded-For``, so the client is the N-th entry from the
    right. Entries further left are whatever the client sent: trusting the left-most one
    (as daphne's ``--proxy-headers`` does) would let a guesser pick a fresh address for
    every attempt. A header too short to hold N entries, or an entry that is not an IP
    address, means the request did not come through the proxies: ``REMOTE_ADDR`` is used.
    """
    remote = request.META.get("REMOTE_ADDR") or None
    proxies: int = settings.ACKBOARD_TRUSTED_PROXIES
    if proxies <= 0:
        return remote
    header = request.META.get("HTTP_X_FORWARDED_FOR", "")
    forwarded = [part.strip() for part in header.split(",") if part.strip()]
    if len(forwarded) < proxies:
        return remote
    candidate = forwarded[-proxies]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote


def login_username(request: HttpRequest, credentials: dict[str, Any] | None) -> str | None:
    """The username a login attempt is counted under (``AXES_USERNAME_CALLABLE``, set
    only when single sign-on is on).

    For a password login, axes's own rule: the credentials' username field, else the
    form's. For a single sign-on refused after the provider named the user (no mapped
    role, say), that name (``dashboard.access.oidc`` leaves it on the request), so the
    refusal is recorded like a wrong password. A sign-on refused before the provider
    named anyone (a bad state or token) is not counted at all: counted under no name, it
    would let anyone behind the same address lock every sign-on from there out.
    """
    field: str = getattr(settings, "AXES_USERNAME_FORM_FIELD", "username")
    name = credentials.get(field) if credentials else request.POST.get(field)
    if name is None:
        name = getattr(request, USERNAME_ATTR, None)
    return name
