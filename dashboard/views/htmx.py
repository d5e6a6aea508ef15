"""The type of a request that went through django-htmx's middleware.

django-htmx's documented typing pattern: views that read ``request.htmx`` take an
``HtmxHttpRequest``, so mypy knows its attributes (``request.htmx.current_url``,
``.target``…) instead of each view reaching for ``getattr`` or raw ``HX-*`` headers.
Types only: no behaviour, no I/O.
"""

from __future__ import annotations

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
