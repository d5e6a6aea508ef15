"""``{{ name|url_problem }}``: why a listed stream, group or consumer name gets no link.

Empty when the name can be opened through a URL; otherwise the reason, shown beside the
name instead of a link that would answer 400 (``dashboard.display.converters.name_problem``).
"""

from __future__ import annotations

from django import template

from dashboard.display.converters import name_problem

register = template.Library()


@register.filter
def url_problem(name: object) -> str:
    if not isinstance(name, str):
        return "not a name"
    return name_problem(name) or ""
