"""WebSocket routes: one per kind of live surface in ``dashboard.live.registry.KINDS``.

Paths come from the registry, which escapes names exactly like ``dashboard.converters``
does for page URLs (``%`` and ``/`` escaped, then the whole segment percent-encoded),
because the ASGI server decodes the path once before routing. This module only maps
paths to the consumer; it never talks to Redis.
"""

from __future__ import annotations

from django.urls import URLPattern, re_path

from dashboard.live.consumers import SurfaceConsumer
from dashboard.live.registry import KINDS, Surface, socket_path, socket_pattern

websocket_urlpatterns: list[URLPattern] = [
    re_path(socket_pattern(kind), SurfaceConsumer.as_asgi(kind=kind)) for kind in KINDS
]


def live_path(
    kind: str, *, stream: str = "", group: str = "", entry_id: str = "", view: str = ""
) -> str:
    """The socket path of a surface, e.g. ``/ws/streams/a%252Fb/groups/g/``."""
    if kind not in KINDS:
        raise ValueError(f"unknown live surface kind {kind!r}")
    return socket_path(Surface(kind, stream=stream, group=group, entry_id=entry_id, view=view))
