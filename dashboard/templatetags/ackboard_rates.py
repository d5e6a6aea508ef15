"""Rates on the pages: ``{% lag_age ms %}``, the lag in time next to a lag
count, and ``{% drain_fact estimate %}``'s badge level.

Never reads Redis or the database: the figures come in through the page's context
(``dashboard.views.charts``, the selectors' ``oldest_undelivered_ms``). O(1) each.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from dashboard.display.durations import human_ms
from queue_core import clock

register = template.Library()

#: The drain estimate's kinds (``dashboard.insight.rates.estimate.Estimate.kind``) -> badge level.
_LEVELS = {"drains": "ok", "steady": "warn", "growing": "bad", "stalled": "bad", "idle": "idle"}


@register.simple_tag
def lag_age(epoch_ms: int | None) -> SafeString:
    """The lag in time: how long the oldest entry not yet delivered has waited, with its
    UTC time on hover; "" when nothing waits (the lag count says 0 then)."""
    if epoch_ms is None:
        return SafeString("")
    age = max(0, clock.now_ms() - int(epoch_ms))
    when = datetime.fromtimestamp(int(epoch_ms) / 1000, tz=UTC)
    return format_html(
        '<span class="lag-age dur" data-ms="{}" title="Oldest entry not yet delivered: '
        'added {} UTC, {} ms ago">{} behind</span>',
        age,
        f"{when:%Y-%m-%d %H:%M:%S}",
        f"{age:,}",
        human_ms(age),
    )


@register.filter
def drain_level(estimate: Any) -> str:
    """The badge class of an estimate: ok (drains), warn (steady), bad (growing, stalled)."""
    return _LEVELS.get(getattr(estimate, "kind", ""), "idle")


def overview_lag_extra(drain: Any) -> str:
    """What an overview row adds under its largest lag (``charts.StreamDrain`` or None):
    the lag in time and its worst group's drain estimate, as escaped markup."""
    if drain is None:
        return ""
    out = str(lag_age(drain.oldest_undelivered_ms))
    e = drain.estimate
    if e is not None and e.text:
        out += format_html(
            '<span class="drain-est badge {}" data-kind="{}" title="Group {}: from the '
            'sampled rates over the last {} s">{}</span>',
            drain_level(e),
            e.kind,
            drain.group,
            e.window_s,
            e.text,
        )
    return out
