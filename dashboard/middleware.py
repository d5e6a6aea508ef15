"""Turn Redis outages into a clear 503 page or htmx banner instead of a 500 or a hang."""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

log = logging.getLogger("ackboard.web")


class RedisErrorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, redis.RedisError):
            return None
        log.warning("redis error on %s: %s", request.path, exception)
        if isinstance(exception, redis.TimeoutError):
            problem = "Redis did not answer in time."
        elif isinstance(exception, redis.ConnectionError):
            problem = "Redis is unreachable."
        else:
            problem = f"Redis refused the request: {exception}"
        template = (
            "dashboard/redis_error.html#error-banner"
            if getattr(request, "htmx", False)
            else "dashboard/redis_error.html"
        )
        html = render_to_string(template, {"problem": problem}, request=request)
        response = HttpResponse(html, status=503)
        if getattr(request, "htmx", False):
            # Whatever the request meant to swap, the banner goes into #messages; base.html
            # tells htmx 2 to swap 503 answers (it swaps no error response by default).
            response["HX-Retarget"] = "#messages"
            response["HX-Reswap"] = "innerHTML"
        return response
