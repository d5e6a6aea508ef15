"""WebSocket routes, one per live surface (overview, stream, group, entry).

Stream and group names are escaped exactly like ``dashboard.converters`` does for page
URLs (``%`` and ``/`` escaped, then the whole segment percent-encoded), because the ASGI
server decodes the path once before routing. This module only maps paths to consumers;
it never talks to Redis.
"""

from __future__ import annotations

from urllib.parse import quote

from django.urls import URLPattern, re_path

from dashboard import consumers
from dashboard.converters import NameConverter

_SEGMENT = r"[^/]+"
# Same safe set as django.urls.reverse(), so page and socket URLs escape names alike.
_SAFE = "!$&'()*+,;=~:@"

websocket_urlpatterns: list[URLPattern] = [
    re_path(r"^ws/overview/$", consumers.OverviewConsumer.as_asgi()),
    re_path(rf"^ws/streams/(?P<stream>{_SEGMENT})/$", consumers.StreamConsumer.as_asgi()),
    re_path(
        rf"^ws/streams/(?P<stream>{_SEGMENT})/groups/(?P<group>{_SEGMENT})/$",
        consumers.GroupConsumer.as_asgi(),
    ),
    re_path(
        rf"^ws/streams/(?P<stream>{_SEGMENT})/entries/(?P<entry_id>{_SEGMENT})/$",
        consumers.EntryConsumer.as_asgi(),
    ),
]


def _segment(name: str) -> str:
    return quote(NameConverter().to_url(name), safe=_SAFE)


def live_path(kind: str, *, stream: str = "", group: str = "", entry_id: str = "") -> str:
    """The socket path of a surface, e.g. ``/ws/streams/a%252Fb/groups/g/``."""
    if kind == "overview":
        return "/ws/overview/"
    base = f"/ws/streams/{_segment(stream)}/"
    if kind == "stream":
        return base
    if kind == "group":
        return f"{base}groups/{_segment(group)}/"
    if kind == "entry":
        return f"{base}entries/{quote(entry_id, safe='')}/"
    raise ValueError(f"unknown live surface kind {kind!r}")
