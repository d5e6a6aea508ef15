"""Request middleware: Redis and database outages as clear answers, the user's permissions
in one query, and cheaper compression.

``RedisErrorMiddleware`` turns Redis errors into clear answers instead of a 500 or a hang.
An outage (unreachable, timed out, or a server that refuses work: LOADING, BUSY, OOM,
READONLY…) is a 503 page or htmx banner. A reply saying a stream id the request carried
is invalid (``queue_core.errors.invalid_id`` reads its text) is the request's fault, not
an outage: it gets the styled 400 page. A database that does not answer (Django's
``OperationalError``/``InterfaceError``: down, unreachable, no pooled connection in time)
is a 503 too, rendered without the user (which the database would be needed for). This
middleware never retries and never talks to Redis or the database itself.

``PermissionsMiddleware`` (after Django's ``AuthenticationMiddleware``) hands the user
Django's ``ModelBackend`` would load the same permission set it would, read by one SQL
statement written once per process: the backend's two ORM queries (own and groups'
permissions) cost about 1.5 ms of query compiling on every page, which checks a dozen
permissions. Nothing is kept between requests, so a revoked permission is gone on the
next request. It applies only where ``ModelBackend`` alone grants permissions (the rule
``dashboard.live.session`` batches socket checks by), and never to inactive users or
superusers (Django answers those without the backend). Never writes.

``GZipMiddleware`` is Django's with one change: whole responses are compressed by Intel's
ISA-L (``isal``, standard gzip that any browser reads) at its default level instead of
zlib at Django's fixed 6. On the 116 KB group page zlib level 6 took 0.80 ms and made
10.1 KB, zlib level 3 0.35 ms and 11.2 KB, ISA-L 0.06 ms and 11.5 KB (measured on this
machine; the page takes a few ms end to end, so zlib's time was a tenth of it).
Everything else is Django's: the 200-byte floor, the ``Vary`` header, the weak ETag,
streaming responses (handed to Django's own code) and the random-length padding of the
gzip header (its "Heal The Breach" BREACH mitigation).
"""

from __future__ import annotations

import gzip
import logging
import secrets
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import redis
from django import db
from django.contrib.auth import get_user_model
from django.contrib.auth.middleware import get_user
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.middleware import gzip as django_gzip
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.cache import patch_vary_headers
from django.utils.functional import SimpleLazyObject
from django_htmx.http import reswap, retarget
from isal import igzip, isal_zlib

from dashboard.live.session import _batchable_backends as model_backend_grants
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
            return self._database_down(request, exception)
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
    def _database_down(request: HttpRequest, exception: Exception) -> HttpResponse:
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


@lru_cache(maxsize=4)
def _permissions_sql(vendor: str) -> str | None:
    """Every ``app_label.codename`` a user holds directly or through a group, as
    ``ModelBackend`` gathers them; None when the user model has no Django permissions."""
    user_model = get_user_model()
    try:
        own = user_model._meta.get_field("user_permissions").remote_field.through
        groups = user_model._meta.get_field("groups").remote_field.through
    except Exception:  # FieldDoesNotExist: a user model without PermissionsMixin
        return None
    q = connection.ops.quote_name
    granted = Group.permissions.through

    def column(model: Any, field: str) -> str:
        return q(model._meta.get_field(field).column)

    def table(model: Any) -> str:
        return q(model._meta.db_table)

    return (
        f"SELECT ct.{q('app_label')}, p.{q('codename')} FROM {table(Permission)} p "
        f"JOIN {table(ContentType)} ct ON ct.{q('id')} = p.{column(Permission, 'content_type')} "
        f"WHERE p.{q('id')} IN (SELECT {column(own, 'permission')} FROM {table(own)} "
        f"WHERE {column(own, 'user')} = %s) "
        f"OR p.{q('id')} IN (SELECT gp.{column(granted, 'permission')} FROM {table(granted)} gp "
        f"JOIN {table(groups)} ug ON ug.{column(groups, 'group')} = gp.{column(granted, 'group')} "
        f"WHERE ug.{column(groups, 'user')} = %s)"
    )


def permissions_load(user: Any) -> Any:
    """``user`` with ``ModelBackend``'s permission cache filled by one query, when it
    would have asked the database: an active, non-superuser user without it yet."""
    if (
        not getattr(user, "is_authenticated", False)
        or not getattr(user, "is_active", True)
        or getattr(user, "is_superuser", False)
        or hasattr(user, "_perm_cache")
    ):
        return user
    sql = _permissions_sql(connection.vendor)
    if sql is None:
        return user
    with connection.cursor() as cursor:
        cursor.execute(sql, [user.pk, user.pk])
        # The attribute ModelBackend.get_all_permissions caches its answer in, per request.
        user._perm_cache = {f"{app}.{codename}" for app, codename in cursor.fetchall()}
    return user


class PermissionsMiddleware:
    """The request's user, when first used, with its permissions read by one query."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.enabled = model_backend_grants()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.enabled and hasattr(request, "session"):
            # As AuthenticationMiddleware's lazy user (the same request._cached_user).
            lazy = SimpleLazyObject(lambda: permissions_load(get_user(request)))
            request.user = lazy  # type: ignore[assignment]  # as AuthenticationMiddleware's
        return self.get_response(request)


#: ISA-L's default level (0-3); Django's ``compress_string`` uses zlib at 6.
COMPRESS_LEVEL = isal_zlib.ISAL_DEFAULT_COMPRESSION


def compress_padded(content: bytes, max_random_bytes: int) -> bytes:
    """``content`` gzipped by ISA-L at ``COMPRESS_LEVEL``, with Django's padding: a
    random-length file name in the gzip header (``compress_string``'s mitigation)."""
    packed = igzip.compress(content, compresslevel=COMPRESS_LEVEL, mtime=0)
    if not max_random_bytes:
        return packed
    header = bytearray(packed[:10])
    header[3] = gzip.FNAME
    name = b"a" * secrets.randbelow(max_random_bytes) + b"\x00"
    return bytes(header) + name + packed[10:]


class GZipMiddleware(django_gzip.GZipMiddleware):
    """Django's ``GZipMiddleware``, compressing whole responses at ``COMPRESS_LEVEL``."""

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        if (
            not isinstance(response, HttpResponse)  # streaming: Django's own code
            or len(response.content) < 200
            or response.has_header("Content-Encoding")
        ):
            return super().process_response(request, response)
        patch_vary_headers(response, ("Accept-Encoding",))
        if not django_gzip.re_accepts_gzip.search(request.META.get("HTTP_ACCEPT_ENCODING", "")):
            return response
        packed = compress_padded(response.content, self.max_random_bytes)
        if len(packed) >= len(response.content):
            return response
        response.content = packed
        response.headers["Content-Length"] = str(len(packed))
        etag = response.get("ETag")
        if etag and etag.startswith('"'):
            response.headers["ETag"] = "W/" + etag
        response.headers["Content-Encoding"] = "gzip"
        return response
