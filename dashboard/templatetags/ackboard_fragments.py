"""``{% fragment %}``: a page region rendered once and reused, forms and all.

Django's ``{% cache %}`` can't hold a region with a form: the CSRF token it would store is
the first visitor's, and each response must carry the current user's token, masked
afresh (Django's BREACH mitigation, which the compressed pages rely on). This tag renders
its body with a per-process placeholder in place of the token and stores that; every
response gets the placeholder replaced with the request's own masked token. The same goes
for the server's clock (``{% server_clock %}``, base.html's): each response carries the
second it was served. The placeholders are random per process, so no payload can contain
them.

    {% fragment "row-action-forms" stream group %}…{% endfragment %}

The rendering is keyed by the name, the values listed after it (resolved in the page's
context; use values whose ``repr`` is their content: strings, numbers, dataclasses), and
implicitly by what every region may show of the request: its full path (the forms' "next"
field) and the user's name and permissions. **Anything else the body shows must be listed**,
or a stale rendering would be served for it. Settings are read at render time, so a
changed setting (tests: ``override_settings``) empties the cache (``setting_changed``).

Without a logged-in request and its CSRF token in the context (a live push's rendering,
for a stand-in user), the body renders as usual, and nothing is stored; nor when a value
is ``NO_STORE`` (what it shows changes with every request). Renderings live in the
"page_fragments" cache (per process, ``settings.CACHES``), or the one named after
``using`` (base.html's ``{% fragment "page" page_key|or_no_store using "page_renderings" %}``:
whole pages in a cache of their own, so they never push the small ones out), beside the
pending table's ``{% cache %}`` renderings ("template_fragments").
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import secrets
import time
from typing import Any

from django import template
from django.core.cache import InvalidCacheBackendError, caches
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.template.base import FilterExpression, Parser, Token

register = template.Library()

CACHE_ALIAS = "page_fragments"
#: The pending table's {% cache %} renderings (Django's tag, ``ackboard_rows``).
TABLES_ALIAS = "template_fragments"
#: Whole page regions (the group page's content: dashboard.views.pages).
PAGES_ALIAS = "page_renderings"
#: A value that says "render, store nothing": what the region shows changes every request.
NO_STORE = "ackboard-fragment-no-store"
#: How long a rendering is kept (s); entries are small and keyed by content anyway.
TIMEOUT_S = 300
#: Replaced by the request's masked token in every response; random per process.
_TOKEN_PLACEHOLDER = "ackboard-csrf-" + secrets.token_hex(16)
#: Replaced by the second each response is served in (``{% server_clock %}``).
_CLOCK_PLACEHOLDER = "ackboard-clock-" + secrets.token_hex(16)
#: The context variable ``{% server_clock %}`` reads while a fragment is being stored.
_CLOCK_VAR = "ackboard_fragment_clock"
#: Splits a rendering into text and placeholders, stored as a tuple: serving it is one
#: join, not a search of the whole text for each placeholder.
_PLACEHOLDERS = re.compile(f"({_TOKEN_PLACEHOLDER}|{_CLOCK_PLACEHOLDER})")
_VERSION = "fragment-3"


def _user_key(context: template.Context) -> tuple[Any, ...] | None:
    """What the region may show of the request, or None when it must not be stored: no
    logged-in user, or a rendering with no CSRF token (a live push's, for a stand-in user,
    renders its forms without one)."""
    request = getattr(context, "request", None) or context.get("request")
    user: Any = getattr(request, "user", None)
    if (
        request is None
        or not getattr(user, "is_authenticated", False)
        or not hasattr(user, "get_all_permissions")
        or context.get("csrf_token") is None
    ):
        return None
    perms = tuple(sorted(user.get_all_permissions()))
    return (request.get_full_path(), user.get_username(), perms)


class FragmentNode(template.Node):
    def __init__(
        self,
        nodelist: template.NodeList,
        name: str,
        vary: list[FilterExpression],
        alias: str = CACHE_ALIAS,
    ) -> None:
        self.nodelist = nodelist
        self.name = name
        self.vary = vary
        self.alias = alias

    def render(self, context: template.Context) -> str:
        values = tuple(expr.resolve(context) for expr in self.vary)
        if any(isinstance(v, str) and v == NO_STORE for v in values):
            return self.nodelist.render(context)
        user_key = _user_key(context)
        if user_key is None:
            return self.nodelist.render(context)
        digest = hashlib.blake2b(
            repr((_VERSION, self.name, user_key, values)).encode(), digest_size=20
        ).hexdigest()
        key = f"ackboard.fragment.{self.name}.{digest}"
        try:
            cache = caches[self.alias]
        except InvalidCacheBackendError:  # settings without it: render, store nothing
            return self.nodelist.render(context)
        stored: tuple[str, ...] | None = cache.get(key)
        if stored is None:
            with context.push({"csrf_token": _TOKEN_PLACEHOLDER, _CLOCK_VAR: _CLOCK_PLACEHOLDER}):
                stored = tuple(_PLACEHOLDERS.split(self.nodelist.render(context)))
            cache.set(key, stored, TIMEOUT_S)
        if len(stored) == 1:
            return stored[0]
        # Text and placeholders alternate (the split's capture group): each placeholder
        # becomes this response's own value, the whole joined in one pass.
        # (Inside a region being stored, the enclosing region's placeholders stay.)
        own = {_CLOCK_PLACEHOLDER: server_clock(context)}
        if _TOKEN_PLACEHOLDER in stored:
            # The request's own token (the csrf context processor's lazy get_token),
            # masked afresh for this response, as {% csrf_token %} would have written it.
            own[_TOKEN_PLACEHOLDER] = str(context.get("csrf_token", ""))
        return "".join(own[part] if i % 2 else part for i, part in enumerate(stored))


def _clock() -> str:
    """The server's clock in whole seconds since the epoch (``{% now "U" %}``)."""
    return str(int(time.time()))


@register.simple_tag(takes_context=True)
def server_clock(context: template.Context) -> str:
    """The server's clock in whole seconds (what ``{% now "U" %}`` writes), which the
    browser's relative times start from: in a stored fragment, the second each response
    is served in."""
    stored: str | None = context.get(_CLOCK_VAR)
    return stored if stored is not None else _clock()


@register.filter
def or_no_store(key: Any) -> Any:
    """``key``, or ``NO_STORE`` when there is none: a region whose key the view computes
    is never stored under an empty one by a rendering that did not compute it."""
    return key if key else NO_STORE


@register.tag("fragment")
def fragment(parser: Parser, token: Token) -> FragmentNode:
    """``{% fragment "name" value… [using "alias"] %}…{% endfragment %}``: see the
    module's docstring."""
    bits = token.split_contents()
    if len(bits) < 2 or bits[1][0] not in "'\"" or bits[1][0] != bits[1][-1]:
        raise template.TemplateSyntaxError("fragment takes a quoted name, then the values")
    alias = CACHE_ALIAS
    if len(bits) >= 4 and bits[-2] == "using":
        quoted = bits[-1]
        if quoted[0] not in "'\"" or quoted[0] != quoted[-1]:
            raise template.TemplateSyntaxError("fragment: using takes a quoted cache alias")
        alias, bits = quoted[1:-1], bits[:-2]
    nodelist = parser.parse(("endfragment",))
    parser.delete_first_token()
    return FragmentNode(
        nodelist, bits[1][1:-1], [parser.compile_filter(b) for b in bits[2:]], alias
    )


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    """Renderings read Ackboard's settings (explanations, defaults): a changed one empties
    them, the pending table's {% cache %} renderings included. (A test that replaces
    ``CACHES`` itself may leave no such cache: nothing to empty then.)"""
    if not setting.startswith("ACKBOARD_"):
        return
    for alias in (CACHE_ALIAS, TABLES_ALIAS, PAGES_ALIAS):
        with contextlib.suppress(InvalidCacheBackendError):
            caches[alias].clear()
