"""WebSocket routes: one per kind of live surface in ``dashboard.live.registry.KINDS``.

Paths come from the registry, which escapes names exactly like ``dashboard.display.converters``
does for page URLs (``%`` and ``/`` escaped, then the whole segment percent-encoded),
because the ASGI server decodes the path once before routing. ``websocket_routes`` (what
``dashboard.asgi`` routes) ends with a catch-all: any other path is closed with 4404 by
``UnroutedConsumer``, quietly, where Channels' router would raise and the server answer 500
with a traceback. This module only maps paths to consumers; it never talks to Redis.
"""

from __future__ import annotations

from django.urls import URLPattern, re_path

from dashboard.live.consumers import SurfaceConsumer, UnroutedConsumer
from dashboard.live.registry import KINDS, Surface, socket_path, socket_pattern

websocket_urlpatterns: list[URLPattern] = [
    re_path(socket_pattern(kind), SurfaceConsumer.as_asgi(kind=kind)) for kind in KINDS
]
#: The surfaces, then every other path (refused with 4404).
websocket_routes: list[URLPattern] = [
    *websocket_urlpatterns,
    re_path(r"", UnroutedConsumer.as_asgi()),
]


def live_path(
    kind: str, *, stream: str = "", group: str = "", entry_id: str = "", view: str = ""
) -> str:
    """The socket path of a surface, e.g. ``/ws/streams/a%252Fb/groups/g/``."""
    if kind not in KINDS:
        raise ValueError(f"unknown live surface kind {kind!r}")
    return socket_path(Surface(kind, stream=stream, group=group, entry_id=entry_id, view=view))
