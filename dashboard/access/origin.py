"""The WebSocket Origin check: a socket is opened only by a page of this site.

Browsers send ``Origin`` on every WebSocket handshake and let any page open a socket to
any server, with the user's cookies. So the handshake must come from a page whose
origin, meaning scheme, host *and* port, is the site's own, or one listed in
``DJANGO_CSRF_TRUSTED_ORIGINS`` (``settings.CSRF_TRUSTED_ORIGINS``, same syntax and
meaning as for Django's CSRF check, ``https://*.example.com`` included). The site's own
origin is what Django would say for an HTTP request with the same headers: the scheme
from the socket (``ws`` is http, ``wss`` is https, or the proxy's header when
``SECURE_PROXY_SSL_HEADER`` is set), the host from ``Host`` (``USE_X_FORWARDED_HOST``
honoured), which must be in ``ALLOWED_HOSTS``, so a rebound DNS name cannot pass
with a matching Origin of its own.

A missing, ``null`` or unparsable Origin is refused: browsers always send one, and
``null`` comes from sandboxed frames and ``file:`` pages. A non-browser client (a
script) must send the site's origin itself. A refused handshake is closed before it is
accepted, which daphne answers with a 403; nothing reaches a consumer.

Never does I/O; costs one header scan per handshake.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest
from django.utils.http import is_same_domain

_DEFAULT_PORTS = {"http": 80, "https": 443}
#: (scheme, host, port) with the host lower-cased and without IPv6 brackets.
Origin = tuple[str, str, int]


class _Handshake(HttpRequest):
    """The handshake's headers as Django sees an HTTP request's, for ``scheme`` and
    ``get_host()`` (proxy settings and ALLOWED_HOSTS included). Reads nothing else."""

    def __init__(self, scope: dict[str, Any]) -> None:
        super().__init__()
        for raw_name, raw_value in scope.get("headers", []):
            name = raw_name.decode("latin1").upper().replace("-", "_")
            key = name if name in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + name
            value = raw_value.decode("latin1")
            # Repeated headers are joined with commas, as Django's ASGI handler does.
            self.META[key] = f"{self.META[key]},{value}" if key in self.META else value
        server = scope.get("server")
        if server and server[1] is not None:
            self.META["SERVER_NAME"], self.META["SERVER_PORT"] = server[0], str(server[1])
        self._secure = scope.get("scheme", "ws") in ("wss", "https")

    def _get_scheme(self) -> str:
        return "https" if self._secure else "http"


def _parse(value: str) -> Origin | None:
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:  # unparsable, or a port out of range
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.path or parts.query or parts.fragment or parts.username or parts.password:
        return None  # an origin is scheme://host[:port] and nothing else
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _site_origin(scope: dict[str, Any]) -> Origin | None:
    request = _Handshake(scope)
    try:
        host = request.get_host()  # refuses a host outside ALLOWED_HOSTS
    except (DisallowedHost, KeyError):  # KeyError: neither a Host header nor a server address
        return None
    return _parse(f"{request.scheme}://{host}")


def _trusted(origin: Origin) -> bool:
    """Whether ``origin`` is one of CSRF_TRUSTED_ORIGINS (Django's CSRF semantics)."""
    scheme, host, port = origin
    netloc = host if port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        if "*" in trusted:
            # "https://*.example.com": that scheme, example.com and its subdomains.
            pattern = urlsplit(trusted)
            domain = pattern.netloc[pattern.netloc.index("*") + 1 :]
            if pattern.scheme == scheme and is_same_domain(netloc, domain):
                return True
        elif _parse(trusted) == origin:
            return True
    return False


def origin_allowed(scope: dict[str, Any]) -> bool:
    """Whether the handshake in ``scope`` comes from this site's own or a trusted origin."""
    raw = ""
    for name, value in scope.get("headers", []):
        if name == b"origin":
            raw = value.decode("latin1")
    origin = _parse(raw)
    site = _site_origin(scope)
    if origin is None or site is None:
        return False
    return origin == site or _trusted(origin)


class SiteOriginValidator:
    """ASGI middleware: refuses a WebSocket handshake whose Origin is not this site's."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
