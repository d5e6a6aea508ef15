"""Template helpers for the pages: human durations with the exact value on hover, ages of
stream ids, and copy-id buttons.

Times since an instant (an entry's age, how long a pending entry or a consumer has been
idle) are written by the browser, not here: ``since_span`` puts the instant in a
``data-since`` attribute and ackboard.js writes "3 min 20 s" from it against the
server's clock (``<meta name="ackboard-now">`` in base.html; the browser's own clock may
be off), and keeps it current. So the HTML of a table changes only when what it shows
changes, not every millisecond: live pushes send only partials that changed, and the
group page's pending table can be reused (``ackboard_rows.pending_table_key``).
Without JavaScript such a time reads as its UTC instant.

Everything here returns escaped HTML built like ``format_html`` (``_html``); nothing marks
user-controlled text safe.
"""

from __future__ import annotations

import html
import time
from datetime import UTC, datetime
from typing import Any

from django import template
from django.conf import settings
from django.utils.safestring import SafeString, mark_safe

from dashboard.display.durations import human_ms
from queue_core.validation import entry_id_check, entry_id_ms

register = template.Library()


def _html(markup: str, *args: Any) -> SafeString:
    """``format_html`` with the same escaping (``conditional_escape``: safe values as they
    are, others through ``html.escape``), minus Django's lazy-string wrappers: the pending
    table calls these helpers 100 times a page, and the wrappers cost more than the rest."""
    values = (a.__html__() if hasattr(a, "__html__") else html.escape(str(a)) for a in args)
    return mark_safe(markup.format(*values))  # noqa: S308 - every value escaped above


@register.filter
def duration(ms: int | float | None) -> str:
    """``{{ row.idle_ms|duration }}`` -> ``3 min 20 s`` (plain text)."""
    return human_ms(ms)


@register.simple_tag
def duration_span(ms: int | float | None, prefix: str = "") -> SafeString:
    """A duration with the exact milliseconds on hover: ``<span title="200,000 ms">``."""
    if ms is None:
        return _html('<span class="muted">—</span>')
    exact = f"{int(ms):,} ms"
    return _html(
        '<span class="dur" title="{}" data-ms="{}">{}{}</span>',
        exact,
        int(ms),
        f"{prefix} " if prefix else "",
        human_ms(ms),
    )


def _id_ms(entry_id: str | None) -> int | None:
    """A stream id's ms part, or None for anything that is not a stream id."""
    try:
        return entry_id_ms(entry_id_check(str(entry_id))) if entry_id else None
    except ValueError:
        return None


@register.simple_tag
def since_span(epoch_ms: int | None, prefix: str = "", ago: bool = False) -> SafeString:
    """The time since ``epoch_ms``, written and kept current by the browser (module
    docstring): ``<span class="dur" data-since="…">``, "``prefix`` 3 min 20 s[ ago]",
    with the exact instant and age on hover. The server's text (no JavaScript) is the
    UTC instant to the second. Built directly (a table writes up to 100 of them): the
    only text is ``prefix``, escaped."""
    if epoch_ms is None:
        return _NONE
    at = int(epoch_ms)
    shown = html.escape(prefix)
    attrs = f' data-prefix="{shown}"' if prefix else ""
    text = f"{shown} " if prefix else ""
    if ago:
        attrs += " data-ago"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at // 1000))
    text += f"{'at' if ago else 'since'} {when} UTC"
    return mark_safe(f'<span class="dur" data-since="{at}"{attrs}>{text}</span>')  # noqa: S308


_NONE = mark_safe('<span class="muted">—</span>')


@register.simple_tag
def age_span(epoch_ms: int | None, prefix: str = "") -> SafeString:
    """How long ago ``epoch_ms`` was ("3 min ago"), with the exact UTC time on hover."""
    return since_span(epoch_ms, prefix, ago=True)


@register.simple_tag
def id_age(entry_id: str | None, prefix: str = "") -> SafeString:
    """The age of a stream id (its ms part is the time it was added)."""
    return age_span(_id_ms(entry_id), prefix)


@register.filter
def id_time(entry_id: str | None) -> str:
    """The UTC time a stream id was added: ``2026-11-30 19:57:30.123``."""
    ms = _id_ms(entry_id)
    if ms is None:
        return ""
    when = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return f"{when:%Y-%m-%d %H:%M:%S}.{ms % 1000:03d}"


@register.simple_tag
def copy_button(value: str, label: str = "copy") -> SafeString:
    """A button that copies ``value`` (ackboard.js handles ``[data-copy]``)."""
    return _html(
        '<button type="button" class="copy" data-copy="{}" title="Copy {}" '
        'aria-label="Copy {}">{}</button>',
        value,
        value,
        value,
        label,
    )


@register.simple_tag
def trace_link(trace_id: str) -> SafeString:
    """A link to ``trace_id`` in the team's tracing UI (``ACKBOARD_TRACE_URL``), or
    nothing without a URL or a trace id. The id is 32 hex digits
    (``queue_core.tracing``), so the URL is the operator's template and nothing else."""
    url = getattr(settings, "ACKBOARD_TRACE_URL", "")
    if not url or not trace_id:
        return SafeString("")
    return _html(
        '<a class="trace-link" href="{}" rel="noopener noreferrer" target="_blank" '
        'title="Trace {}">trace {}…</a>',
        url.replace("{trace_id}", trace_id),
        trace_id,
        trace_id[:8],
    )


@register.filter
def human_bytes(size: int | None) -> str:
    if size is None:
        return ""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
