"""The overview's stream rows, ``{% overview_rows rows %}``, and the health badge,
``{% verdict_badge verdict %}``.

Owns the markup of one overview row. Through the template engine a row cost about 40
node renders (names, links, filters, the health lines): most of the page's time, about
0.3 ms a row on the 2-core test machine. Here a row is one ``str.format`` of values
escaped once, and the URL prefixes are reversed once per table, so a 50-row page renders
in a few ms. The table around the rows stays in ``templates/dashboard/overview.html``
(partial ``stream-table``), which the page, its htmx swap and its live push all render.
The badge is ``dashboard.insight.health.verdict_html`` in a row and in ``verdict_badge`` (the group
page's), so both pages show a verdict and its reason with the same markup.

Every value put into the markup goes through ``html.escape`` (what Django's ``escape``
does, without its lazy-string wrapper, which costs more than the escaping). Never touches
Redis or the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from django import template
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from dashboard.display.converters import name_problem, name_segment
from dashboard.insight.health import BAD, verdict_html
from dashboard.templatetags.ackboard import age_span
from dashboard.templatetags.ackboard_rates import overview_lag_extra

register = template.Library()

_ROW = (
    '<tr id="stream-row-{n}">\n'
    '          <td class="name">{name_cell}</td>\n'
    "          <td>{verdict}\n"
    "            {flagged}</td>\n"
    '          <td class="num">{length}</td>\n'
    '          <td class="num hide-sm">{groups}</td>\n'
    '          <td class="num">{pending}</td>\n'
    '          <td class="num hide-sm">{lag}</td>\n'
    '          <td class="hide-sm">{oldest}</td>\n'
    '          <td class="num">{dlq}</td>\n'
    '          <td class="num hide-sm">{failures}</td>\n'
    "        </tr>\n"
)
_FLAGGED = '<div class="muted small health-group">{group}: {state}</div>\n            '
_NO_LINK = '{name} <span class="muted small no-link">({why})</span>'
_LAG_UNKNOWN = '<span class="muted" title="The server does not know the lag">?</span>'
_NONE = '<span class="muted">—</span>'
#: A placeholder name whose segment is itself, to find the URL prefixes once.
_MARK = "ackboard-stream-mark"


def _short(value: str, length: int) -> str:
    # Truncator normalises and measures the text: skip it for the (usual) short value.
    return value if len(value) <= length else Truncator(value).chars(length)


def _url(pattern: tuple[str, str], name: str) -> str:
    return pattern[0] + name_segment(name) + pattern[1]


def _pattern(view: str) -> tuple[str, str]:
    before, _, after = reverse(view, args=[_MARK]).partition(_MARK)
    return before, after


@register.simple_tag
def overview_rows(rows: Iterable[Any], drains: Mapping[str, Any] | None = None) -> SafeString:
    """The ``<tr>`` of each ``overview_page.OverviewRow``, in order. ``drains``: each stream's lag
    in time and drain estimate (``views.charts.overview_drains``), shown under its lag."""
    drains = drains or {}
    stream_url = _pattern("dashboard:stream-detail")
    dlq_url = _pattern("dashboard:dlq")
    out = []
    for n, row in enumerate(rows, start=1):
        s = row.summary
        name = escape(_short(s.name, 80))
        why = name_problem(s.name)
        if why:
            name_cell = _NO_LINK.format(name=name, why=escape(why))
            dlq = str(s.dlq_length)
        else:
            name_cell = f'<a href="{escape(_url(stream_url, s.name))}">{name}</a>'
            dlq = str(s.dlq_length)
            if s.dlq_length:
                dlq = f'<a href="{escape(_url(dlq_url, s.name))}">{s.dlq_length}</a>'
        # The red groups, each on its own line (the badge is the worst one's verdict).
        flagged = "".join(
            _FLAGGED.format(group=escape(_short(group, 40)), state=escape(v.label))
            for group, v in row.health.flagged
            if v.level == BAD
        )
        out.append(
            _ROW.format(
                n=n,
                name_cell=name_cell,
                verdict=verdict_html(row.health),
                flagged=flagged,
                length=s.length,
                groups=s.groups,
                pending=s.pending,
                lag=(_LAG_UNKNOWN if s.max_lag is None else str(s.max_lag))
                + overview_lag_extra(drains.get(s.name)),
                oldest=age_span(s.oldest_pending_ms) if s.oldest_pending_ms else _NONE,
                dlq=dlq,
                failures=row.failures_last_hour,
            )
        )
    return mark_safe("".join(out))  # every value above was escaped


@register.simple_tag
def verdict_badge(verdict: Any) -> SafeString:
    """A ``dashboard.insight.health`` verdict's badge with its reason beside it (the overview's
    rows use the same markup)."""
    return mark_safe(verdict_html(verdict))  # verdict_html escapes every value
