"""A surface's partials, rendered once for everyone who holds the same permissions.

Owns the stand-ins a shared rendering uses instead of a user's request: a user that has
only a permission set and a request that only knows the page's path. Partials are
rendered from a plain dict, not a RequestContext, so no context processor runs and no
CSRF token or per-user state can leak into a push. Never reads Redis (the context comes
in) and never sends. Cost: one template render per partial.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.context_processors import PermWrapper
from django.http import HttpRequest
from django.template.loader import render_to_string

from dashboard.access.scopes import PermsUser
from dashboard.live.registry import Perms, Surface, surface_path


def surface_render(*, surface: Surface, context: dict[str, Any], perms: Perms) -> dict[str, str]:
    """Each partial of ``surface`` rendered for users with ``perms``: {partial name: html}.

    htmx sends the page's own CSRF token in the X-CSRFToken header, so a pushed form needs
    none. ``request`` is a stand-in that only knows the page's path, for "next" links.
    """
    kind = surface.spec
    user = PermsUser(perms)
    request = HttpRequest()
    request.method = "GET"
    request.path = request.path_info = surface_path(surface)
    request.user = user  # type: ignore[assignment]
    # No "csrf_token" key: {% csrf_token %} renders nothing (with a warning under DEBUG).
    ctx = {**context, "user": user, "perms": PermWrapper(user), "request": request}
    return {name: render_to_string(f"{kind.template}#{name}", ctx) for name in kind.partials}
