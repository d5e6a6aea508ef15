"""Request middleware: Redis and database outages as clear answers.

``RedisErrorMiddleware`` turns Redis errors into clear answers instead of a 500 or a hang.
An outage (unreachable, timed out, or a server that refuses work: LOADING, BUSY, OOM,
READONLY…) is a 503 page or htmx banner. A reply saying a stream id the request carried
is invalid (``queue_core.errors.invalid_id`` reads its text) is the request's fault, not
an outage: it gets the styled 400 page. A database that does not answer (Django's
``OperationalError``/``InterfaceError``: down, unreachable, no pooled connection in time)
is a 503 too, rendered without the user (which the database would be needed for). This
middleware never retries and never talks to Redis or the database itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis
from django import db
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django_htmx.http import reswap, retarget

from queue_core.errors import invalid_id

log = logging.getLogger("ackboard.web")


def redis_problem(exception: redis.RedisError) -> str:
    """One line saying what went wrong with Redis: the banner's, the API's and the CLI's."""
    if isinstance(exception, redis.TimeoutError):
        return "Redis did not answer in time."
    if isinstance(exception, redis.ConnectionError):
        return "Redis is unreachable."
    return f"Redis refused the request: {exception}"


class RedisErrorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, db.OperationalError | db.InterfaceError):
            return self.database_down(request, exception)
        if not isinstance(exception, redis.RedisError):
            return None
        log.warning("redis error on %s: %s", request.path, exception)
        if isinstance(exception, redis.ResponseError) and invalid_id(exception):
            return render(
                request,
                "400.html",
                {"exception": f"Redis rejected an id in that request: {exception}"},
                status=400,
            )
        problem = redis_problem(exception)
        template = (
            "dashboard/redis_error.html#error-banner"
            if getattr(request, "htmx", False)
            else "dashboard/redis_error.html"
        )
        # A command that timed out or lost its connection may still have run, so only a
        # read can promise that nothing changed.
        context = {"problem": problem, "read_only": request.method in ("GET", "HEAD")}
        html = render_to_string(template, context, request=request)
        response = HttpResponse(html, status=503)
        if getattr(request, "htmx", False):
            # Whatever the request meant to swap, the banner goes into #messages; base.html
            # tells htmx 2 to swap 503 answers (it swaps no error response by default).
            response = reswap(retarget(response, "#messages"), "innerHTML")
        return response

    @staticmethod
    def database_down(request: HttpRequest, exception: Exception) -> HttpResponse:
        """The database did not answer (down, unreachable, or no pooled connection came
        within the pool's timeout): a 503 page or htmx banner, rendered without the
        request, since its user and CSRF token would need the database too."""
        log.warning("database error on %s: %s", request.path, exception)
        htmx = getattr(request, "htmx", False)
        template = "dashboard/database_error.html" + ("#error-banner" if htmx else "")
        context = {"read_only": request.method in ("GET", "HEAD")}
        response = HttpResponse(render_to_string(template, context), status=503)
        if htmx:
            response = reswap(retarget(response, "#messages"), "innerHTML")
        return response
