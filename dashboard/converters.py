"""URL converters for stream and group names, which may hold any character but NUL-free text.

Django decodes the path before routing, so a ``/`` in a name cannot be sent as ``%2F``.
``to_url`` escapes only ``%`` and ``/``; ``reverse()`` then percent-encodes the rest, and
``to_python`` undoes exactly those two escapes.
"""

from __future__ import annotations

import re

_UNESCAPE = re.compile(r"%(25|2F)", re.IGNORECASE)


class NameConverter:
    regex = r"[^/]+"

    def to_python(self, value: str) -> str:
        return _UNESCAPE.sub(lambda m: "%" if m.group(1) == "25" else "/", value)

    def to_url(self, value: str) -> str:
        return value.replace("%", "%25").replace("/", "%2F")


class EntryIdConverter:
    """Any path segment; views validate it so a malformed id gets a clear 400, not a 404."""

    regex = r"[^/]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value
