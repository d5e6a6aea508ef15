"""``{% live_url "group" stream=… group=… %}``: the socket path of a page's live surface
(a kind of ``dashboard.live.registry.KINDS``)."""

from __future__ import annotations

from django import template

from dashboard.routing import live_path

register = template.Library()


@register.simple_tag
def live_url(
    kind: str, stream: str = "", group: str = "", entry_id: str = "", view: str = ""
) -> str:
    return live_path(kind, stream=stream, group=group, entry_id=entry_id, view=view)
