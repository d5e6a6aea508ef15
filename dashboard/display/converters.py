"""URL converters for stream and group names, which may hold any character but NUL-free text,
and the one rule for which names a URL can carry (``name_problem``).

Django decodes the path before routing, so a ``/`` in a name cannot be sent as ``%2F``.
``to_url`` escapes ``%`` and ``/``; ``reverse()`` then percent-encodes the rest (the ``%``
of those escapes becomes ``%25``), and ``to_python`` undoes exactly those escapes.

The names ``.`` and ``..`` are escaped too, as ``%2E``: as a bare path segment a browser
(and RFC 3986's dot-segment removal) would resolve them to another page. A bare ``%2E``
would not help, browsers treat it as a dot; the link carries ``%252E``, which they keep.

A name too long for a URL (in characters, or in bytes once encoded: daphne refuses a
request whose request line and headers exceed 16 KB, and the page URL is sent again in
HX-Current-URL and Referer) is listed without a link, saying why (``name_problem``).
"""

from __future__ import annotations

import re
from urllib.parse import quote

from queue_core.keys import MAX_NAME_LENGTH
from queue_core.validation import entry_id_check

_UNESCAPE = re.compile(r"%(25|2F|2E)", re.IGNORECASE)
_UNESCAPED = {"25": "%", "2F": "/", "2E": "."}
#: Names that would be dot segments in a path.
_DOT_SEGMENTS = (".", "..")
#: Longest path segment a name may take once encoded. A group action from the group page
#: sends the stream and group segments twice (request line and HX-Current-URL), plus a
#: Referer of up to 4 KB (Chromium's cap) and ~1 KB of other headers: 4 x 1,536 + 5 KB
#: stays under daphne's 16 KB limit with room for the page's filter query.
MAX_SEGMENT_BYTES = 1536
# Same safe set as django.urls.reverse(), so the measured length is the one in the link.
_SAFE = "!$&'()*+,;=~:@"


def name_segment(name: str) -> str:
    """The path segment of ``name`` as ``reverse()`` writes it."""
    return quote(NameConverter().to_url(name), safe=_SAFE)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be opened through a URL here, or None when it can.

    The one rule for pages, actions, sockets and the templates that link names: a name
    listed with a problem is shown without a link, with this reason.
    """
    if not name:
        return "empty name: open it with redis-cli"
    if "\x00" in name:
        return "name contains a NUL character: open it with redis-cli"
    if len(name) > MAX_NAME_LENGTH:
        return f"name longer than {MAX_NAME_LENGTH} characters: open it with redis-cli"
    size = len(name_segment(name))
    if size > MAX_SEGMENT_BYTES:
        return (
            f"name too long for a URL ({size} bytes encoded, at most {MAX_SEGMENT_BYTES}): "
            "open it with redis-cli"
        )
    return None


class NameConverter:
    regex = r"[^/]+"

    def to_python(self, value: str) -> str:
        return _UNESCAPE.sub(lambda m: _UNESCAPED[m.group(1).upper()], value)

    def to_url(self, value: str) -> str:
        escaped = value.replace("%", "%25").replace("/", "%2F")
        if escaped in _DOT_SEGMENTS:
            return escaped.replace(".", "%2E")
        return escaped


class EntryIdConverter:
    """Any path segment; views validate it so a malformed id gets a clear 400, not a 404.

    Links are made only to ids the page accepts: ``reverse()`` of anything else (an id
    from a malformed failure record, say ``..``) raises NoReverseMatch, so no link is
    made, rather than a link that 400s or that a browser resolves to another page.
    """

    regex = r"[^/]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return entry_id_check(value)
