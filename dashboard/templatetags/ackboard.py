"""Template helpers for the pages: human durations with the exact value on hover, ages of
stream ids, and copy-id buttons.

Everything here returns escaped HTML built like ``format_html`` (``_html``); nothing marks
user-controlled text safe.
"""

from __future__ import annotations

import html
import time
from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


def _html(markup: str, *args: Any) -> SafeString:
    """``format_html`` with the same escaping (``conditional_escape``: safe values as they
    are, others through ``html.escape``), minus Django's lazy-string wrappers: the pending
    table calls these helpers 100 times a page, and the wrappers cost more than the rest."""
    values = (a.__html__() if hasattr(a, "__html__") else html.escape(str(a)) for a in args)
    return mark_safe(markup.format(*values))  # noqa: S308 - every value escaped above


_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000))


def human_ms(ms: int | float | None) -> str:
    """``200000`` -> ``3 min 20 s``: the two largest units, or ms below one second."""
    if ms is None:
        return "—"
    ms = int(ms)
    if ms < 0:
        return "-" + human_ms(-ms)
    if ms < 1_000:
        return f"{ms} ms"
    for i, (unit, size) in enumerate(_UNITS):
        if ms >= size:
            big, rest = divmod(ms, size)
            text = f"{big} {unit}"
            if i + 1 < len(_UNITS):
                next_unit, next_size = _UNITS[i + 1]
                if small := rest // next_size:
                    text += f" {small} {next_unit}"
            return text
    return f"{ms} ms"  # unreachable: ms >= 1000 matches "s"


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
    if not entry_id:
        return None
    head = str(entry_id).partition("-")[0]
    return int(head) if head.isdigit() else None


@register.simple_tag
def age_span(epoch_ms: int | None, prefix: str = "") -> SafeString:
    """How long ago ``epoch_ms`` was, with the exact UTC time and ms on hover."""
    if epoch_ms is None:
        return _html('<span class="muted">—</span>')
    age = max(0, int(time.time() * 1000) - int(epoch_ms))
    when = datetime.fromtimestamp(int(epoch_ms) / 1000, tz=UTC)
    title = f"{when:%Y-%m-%d %H:%M:%S}.{int(epoch_ms) % 1000:03d} UTC · {age:,} ms ago"
    return _html(
        '<span class="dur" title="{}" data-ms="{}">{}{} ago</span>',
        title,
        age,
        f"{prefix} " if prefix else "",
        human_ms(age),
    )


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
