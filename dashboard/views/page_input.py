"""What every read page checks in its URL and query before it reads anything.

Malformed input (a name a URL cannot carry, a bad id, a field offset or idle filter that
is not a whole number in range) raises ``BadRequest``, which ``bad_input`` turns into the
styled 400 page with the reason; a stream the allowlist hides, or a companion, is a 404.
The read pages (``dashboard.views.pages``) and the payload search (``dashboard.views.find``)
share these, so every page refuses the same input the same way.

This module never reads or writes Redis.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from dashboard.display.converters import name_problem
from queue_core.keys import stream_visible
from queue_core.validation import MAX_IDLE_MS, entry_id_check

_DIGITS = re.compile(r"\A\d{1,15}\Z")


def check_visible(stream: str) -> None:
    """404 for a stream the allowlist hides, and for companions (they live under a stream)."""
    if not stream_visible(stream, tuple(settings.ACKBOARD_STREAMS)):
        raise Http404("No such stream here.")


def valid_name(value: str, what: str) -> str:
    """``value`` when a URL can carry it as a ``what`` name, else 400 saying why."""
    problem = name_problem(value)
    if problem is not None:
        raise BadRequest(f"That {what} name cannot be opened here ({problem}).")
    return value


def valid_id(value: str, what: str = "entry id") -> str:
    """``value`` when it is a stream entry id, else 400 saying why."""
    try:
        return entry_id_check(value, what=what)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def optional_id(request: HttpRequest, param: str) -> str | None:
    """The entry id in the query's ``param``, None when absent or blank."""
    value = request.GET.get(param, "").strip()
    return valid_id(value, f"'{param}' id") if value else None


def fields_from_param(request: HttpRequest) -> int:
    """``?fields_from=N``: the entry page's first field shown (0-based; 0 when absent)."""
    value = request.GET.get("fields_from", "").strip()
    if not value:
        return 0
    if not _DIGITS.match(value) or len(value) > 9:
        raise BadRequest("fields_from must be a whole number of fields.")
    return int(value)


def min_idle_param(request: HttpRequest) -> int:
    """``?min_idle=S``: the group page's idle filter in seconds (0 when absent)."""
    value = request.GET.get("min_idle", "").strip()
    if not value:
        return 0
    if not _DIGITS.match(value) or int(value) * 1000 > MAX_IDLE_MS:
        raise BadRequest("Minimum idle must be a whole number of seconds.")
    return int(value)


def bad_input(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Malformed input gets the styled 400 page with the reason (Django's own 400
    handler renders without the request or the message)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except BadRequest as exc:
            return render(request, "400.html", {"exception": str(exc)}, status=400)

    return wrapper
