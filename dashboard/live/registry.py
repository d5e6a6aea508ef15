"""The live surfaces: each kind of live page, declared once.

Owns the table ``KINDS``. An entry names a page's template, the partials pushed to it
(each partial's root element id is its name, which the browser swaps), its context
function (the ``*_context`` the page view also calls), its URL name, its socket path
below ``/ws/``, and what makes it change (its signature over one poll). The broadcaster,
the consumers, the socket routes and ``{% live_url %}`` all read this table: a new live
page is one entry here, plus its template's partial ids and ws attributes.

Names travel in socket paths as they do in page URLs (``dashboard.display.converters``: ``%`` and
``/`` escaped, then the segment percent-encoded, because the server decodes the path once
before routing), and are read back with the pages' own rules, so a socket never follows a
name or id its page refuses. This module never talks to Redis and never renders; it costs
a dict lookup per question.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from django.conf import settings
from django.urls import reverse
from django.utils.module_loading import import_string

from dashboard.display.converters import NameConverter, name_problem, name_segment
from dashboard.insight.stream_index import OverviewQuery
from queue_core.connection import Client
from queue_core.keys import stream_visible
from queue_core.types import LiveStamps
from queue_core.validation import entry_id_check

#: Permission names (``dashboard.retry_entry``, …) a rendering is made for.
Perms = frozenset[str]


@dataclass(frozen=True, slots=True, order=True)
class Surface:
    """One live page context: its kind (a key of ``KINDS``) and the names in its URL."""

    kind: str
    stream: str = ""
    group: str = ""
    entry_id: str = ""
    #: The overview's view (name filter, sort, page) as its canonical query string.
    view: str = ""
    #: A surface listing every stream: the patterns of the streams its sockets may read
    #: (``dashboard.access.scopes``); () for every stream. Set by the socket, not the URL.
    reach: tuple[str, ...] = ()

    @property
    def spec(self) -> SurfaceKind:
        return KINDS[self.kind]

    def params(self) -> dict[str, str]:
        """The names in the surface's URLs, in URL order (``{"stream": …, "group": …}``)."""
        return {name: getattr(self, name) for name in self.spec.params}

    def shows(self, stream: str) -> bool:
        """Whether a change on ``stream`` may change this surface."""
        return self.spec.every_stream or self.stream == stream

    def label(self) -> str:
        """The surface in a log line: its kind and names, each cut to a readable length."""
        names = [repr(p[:80]) for p in (self.stream, self.group, self.entry_id) if p]
        return " ".join(["live surface", self.kind, *names])


@dataclass(frozen=True, slots=True)
class Poll:
    """What one broadcaster cycle read: the change stamps of open streams and groups,
    the newest failure-index row id per stream, the streams the overview lists, the
    fleet stamps of open groups (their pause and heartbeats: ``dashboard.insight.fleet``), and
    the time of the rates sampler's last tick as its ``rates`` event announced it (no
    read: ``dashboard.insight.rates.sampler`` publishes one event per tick)."""

    stamps: LiveStamps
    marks: Mapping[str, int]
    overview_streams: tuple[str, ...]
    fleet: Mapping[tuple[str, str], Any] = field(default_factory=dict)
    rates_at: float | None = None


@dataclass(frozen=True, slots=True)
class SurfaceKind:
    """A kind of live page. ``socket`` is its path below ``/ws/`` with ``{stream}``,
    ``{group}`` or ``{entry_id}`` placeholders: they are the surface's names, in the order
    its page URL (``page``) and its context function take them."""

    template: str
    partials: tuple[str, ...]
    context: str  # dotted path of ``<page>_context(*, client, **names) -> dict``
    page: str
    socket: str
    signature: Callable[[Surface, Poll], Any]
    #: The overview lists every visible stream, so any stream's change may change it.
    every_stream: bool = False

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(f for _, f, _, _ in string.Formatter().parse(self.socket) if f)


# --- what makes each kind change -------------------------------------------------------


def overview_streams(surface: Surface) -> tuple[str, ...]:
    """The streams on an overview surface's page, from the process's stream index: no
    Redis, O(page) once the view's order is cached (``dashboard.insight.stream_index``)."""
    names: Callable[..., tuple[str, ...]] = import_string(_OVERVIEW + "overview_page_names")
    return names(view=surface.view, reach=surface.reach or None)


def _overview_signature(surface: Surface, poll: Poll) -> Any:
    stamps = poll.stamps.streams
    return tuple((n, stamps.get(n), poll.marks.get(n)) for n in overview_streams(surface))


def _stream_signature(surface: Surface, poll: Poll) -> Any:
    # The sampler's tick: the pushed facts carry the chart's newest point (and, on a group
    # page, the drain estimate), so a queue where nothing changes still gets its point.
    return (poll.stamps.streams.get(surface.stream), poll.marks.get(surface.stream), poll.rates_at)


def _group_signature(surface: Surface, poll: Poll) -> Any:
    # The fleet stamp leaves out a live worker's seen_ms (it moves every heartbeat), so
    # the page is pushed when the pause or what a worker reports changes, not every 2 s.
    pair = (surface.stream, surface.group)
    return (*_stream_signature(surface, poll), poll.stamps.pending.get(pair), poll.fleet.get(pair))


def _entry_signature(surface: Surface, poll: Poll) -> Any:
    # A new entry on the stream does not change an older entry's state.
    s = poll.stamps.streams.get(surface.stream)
    mark = poll.marks.get(surface.stream)
    return None if s is None else (s.groups, s.dlq_length, s.failures_length, mark)


def _dlq_signature(surface: Surface, poll: Poll) -> Any:
    # Every dead-letter change (a new one, replay, delete, purge) moves the DLQ's length
    # or publishes an event, which marks the stream changed anyway.
    s = poll.stamps.streams.get(surface.stream)
    if s is None:
        return None
    from dashboard.redrive.live import redrive_stamp  # models: imported once apps are ready

    return (s.dlq_length, redrive_stamp(surface.stream))


_PAGES = "dashboard.views.pages."
_OVERVIEW = "dashboard.views.overview_page."
_GROUP = "dashboard.views.group_page."

KINDS: dict[str, SurfaceKind] = {
    "overview": SurfaceKind(
        template="dashboard/overview.html",
        partials=("stream-table",),
        context=_OVERVIEW + "overview_context",
        page="dashboard:overview",
        socket="overview/{view}/",
        signature=_overview_signature,
        every_stream=True,
    ),
    "stream": SurfaceKind(
        template="dashboard/stream.html",
        partials=("stream-facts", "group-table", "entry-table"),
        context=_PAGES + "stream_context",
        page="dashboard:stream-detail",
        socket="streams/{stream}/",
        signature=_stream_signature,
    ),
    "group": SurfaceKind(
        template="dashboard/group.html",
        partials=(
            "group-fleet",
            "group-summary",
            "consumer-table",
            "group-workers",
            "pending-table",
        ),
        context=_GROUP + "group_context",
        page="dashboard:group-detail",
        socket="streams/{stream}/groups/{group}/",
        signature=_group_signature,
    ),
    "entry": SurfaceKind(
        template="dashboard/entry.html",
        partials=("entry-state", "failure-history"),
        context=_PAGES + "entry_context",
        page="dashboard:entry-detail",
        socket="streams/{stream}/entries/{entry_id}/",
        signature=_entry_signature,
    ),
    "dlq": SurfaceKind(
        template="dashboard/dlq.html",
        partials=("dlq-table", "redrive-panel"),
        context=_PAGES + "dlq_context",
        page="dashboard:dlq",
        socket="streams/{stream}/dlq/",
        signature=_dlq_signature,
    ),
}


# --- names in socket paths --------------------------------------------------------------


def _page_name(raw: str) -> str | None:
    name = NameConverter().to_python(raw)
    return None if name_problem(name) else name  # the pages' own rule


def _visible_stream(raw: str) -> str | None:
    name = _page_name(raw)
    if name is None or not stream_visible(name, tuple(settings.ACKBOARD_STREAMS)):
        return None  # hidden, or a companion (shown under its stream, as on the pages)
    return name


def _view_segment(view: str) -> str:
    return name_segment(view) if view else "-"  # a route segment is never empty


def _overview_view(raw: str) -> str | None:
    """The canonical view of a socket path segment, or None where the page answers 400."""
    if raw == "-":
        return ""
    try:
        return OverviewQuery.from_view(NameConverter().to_python(raw)).encode()
    except ValueError:
        return None


def _page_entry_id(raw: str) -> str | None:
    try:
        # The page's own check (both parts within 64 bits), so a socket never follows an
        # id the page answers 400 for.
        return entry_id_check(raw)
    except ValueError:
        return None


#: Each name's (path segment writer, reader that answers None for what the page refuses).
_CODECS: dict[str, tuple[Callable[[str], str], Callable[[str], str | None]]] = {
    "stream": (name_segment, _visible_stream),
    "group": (name_segment, _page_name),
    "entry_id": (lambda value: quote(value, safe=""), _page_entry_id),
    "view": (_view_segment, _overview_view),
}


def socket_path(surface: Surface) -> str:
    """The socket path of a surface, e.g. ``/ws/streams/a%252Fb/groups/g/``."""
    segments = {k: _CODECS[k][0](v) for k, v in surface.params().items()}
    return "/ws/" + surface.spec.socket.format(**segments)


def socket_pattern(kind: str) -> str:
    """The route regex of a kind's socket path (one named group per name)."""
    parts = string.Formatter().parse(KINDS[kind].socket)
    regex = "".join(lit + (f"(?P<{name}>[^/]+)" if name else "") for lit, name, _, _ in parts)
    return f"^ws/{regex}$"


def surface_from_route(kind: str, names: Mapping[str, str]) -> Surface | None:
    """The surface a socket route names, or None where its page would refuse a name."""
    values: dict[str, str] = {}
    for param in KINDS[kind].params:
        value = _CODECS[param][1](names.get(param, ""))
        if value is None:
            return None
        values[param] = value
    return Surface(kind, **values)  # type: ignore[arg-type]  # only the str fields


# --- the page behind a surface ----------------------------------------------------------


def surface_path(surface: Surface) -> str:
    """The page URL path of a surface's default view, decoded like ``request.path``."""
    names = [v for k, v in surface.params().items() if k != "view"]
    path = unquote(reverse(surface.spec.page, args=names))
    return path + "?" + surface.view if surface.view else path


def surface_context(*, surface: Surface, client: Client) -> dict[str, Any]:
    """The page context of a surface's default view (first page, no filters).

    The context function is looked up by name on each call (the module is imported once):
    the pages module imports views machinery, so the registry does not import it itself.
    """
    context: Callable[..., dict[str, Any]] = import_string(surface.spec.context)
    if surface.spec.every_stream:  # only the streams its sockets may read
        return context(client=client, reach=surface.reach or None, **surface.params())
    return context(client=client, **surface.params())
