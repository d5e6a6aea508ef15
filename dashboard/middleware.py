"""Request middleware: Redis errors as clear answers, and the user's permissions in one query.

``RedisErrorMiddleware`` turns Redis errors into clear answers instead of a 500 or a hang.
An outage (unreachable, timed out, or a server that refuses work: LOADING, BUSY, OOM,
READONLY…) is a 503 page or htmx banner. A reply saying a stream id the request carried
is invalid (``queue_core.errors.invalid_id`` reads its text) is the request's fault, not
an outage: it gets the styled 400 page. This middleware never retries and never talks to
Redis itself.

``PermissionsMiddleware`` (after Django's ``AuthenticationMiddleware``) hands the user
Django's ``ModelBackend`` would load the same permission set it would, read by one SQL
statement written once per process: the backend's two ORM queries (own and groups'
permissions) cost about 1.5 ms of query compiling on every page, which checks a dozen
permissions. When the session was logged in through ``ModelBackend`` itself and the user
model is Django's ``User``, that statement reads the user's row too (``request_user``):
one query per request instead of two, with ``django.contrib.auth.get_user``'s rules kept
(the session's user id and backend path, ``is_active``, the session auth hash with its
fallback secrets: a password change still logs the other sessions out). Any other
session goes through ``get_user`` as before. Nothing is kept between requests, so a
deactivated user or a revoked permission takes effect on the next request. It applies
only where ``ModelBackend`` alone grants permissions (the rule ``dashboard.live.session``
batches socket checks by), and never fills the permissions of inactive users or
superusers (Django answers those without the backend). Sockets are untouched: Channels'
``AuthMiddlewareStack`` loads their user itself. Never writes, except what ``get_user``
does to a session whose hash does not verify (flush, or a new key for a fallback secret).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache
from typing import Any, cast

import redis
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser, Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection, connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.crypto import constant_time_compare
from django.utils.functional import SimpleLazyObject
from django_htmx.http import reswap, retarget

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


#: The path Django's own ``ModelBackend`` is configured by.
_MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


@lru_cache(maxsize=8)
def _plain_model_backend(path: str) -> bool:
    """Whether the backend at ``path`` is Django's ``ModelBackend`` itself (no subclass)."""
    return path == _MODEL_BACKEND or type(auth.load_backend(path)) is ModelBackend


#: ``_user_sql``'s answers by connection vendor.
_USER_SQL: dict[str, tuple[str, list[Any]]] = {}


def _user_sql(db: BaseDatabaseWrapper) -> tuple[str, list[Any]]:
    """The user's row and its permissions in one statement: ``User``'s columns, then
    (app_label, codename), one row per permission (NULLs when it has none); and each
    column's converters, as the ORM applies them. Parameters: the pk three times."""
    cached = _USER_SQL.get(db.vendor)
    if cached is not None:
        return cached
    permissions = _permissions_sql(db.vendor)
    assert permissions is not None  # User has PermissionsMixin
    q = db.ops.quote_name
    fields = User._meta.concrete_fields
    table = User._meta.db_table
    cols = ", ".join(f"u.{q(cast(str, f.column))}" for f in fields)
    sql = (
        f"SELECT {cols}, perms.{q('app_label')}, perms.{q('codename')} "
        f"FROM {q(table)} u LEFT JOIN ({permissions}) perms ON 1 = 1 "
        f"WHERE u.{q(cast(str, User._meta.pk.column))} = %s"
    )
    converters = []
    for f in fields:
        col = f.get_col(table)
        converters.append((col, db.ops.get_db_converters(col) + col.get_db_converters(db)))
    _USER_SQL[db.vendor] = (sql, converters)
    return sql, converters


def _user_with_permissions(db: BaseDatabaseWrapper, user_id: Any) -> User | None:
    """``ModelBackend.get_user(user_id)`` (None for no such or an inactive user) with
    ``ModelBackend``'s permission cache filled, from one query."""
    sql, converters = _user_sql(db)
    fields = User._meta.concrete_fields
    pk = User._meta.pk.get_db_prep_value(user_id, db, prepared=False)
    with db.cursor() as cursor:
        cursor.execute(sql, [pk, pk, pk])
        rows = cursor.fetchall()
    if not rows:
        return None
    values = []
    for value, (col, column_converters) in zip(rows[0], converters, strict=False):
        for convert in column_converters:
            value = convert(value, col, db)
        values.append(value)
    user = User.from_db(db.alias, [f.attname for f in fields], values)
    if not ModelBackend().user_can_authenticate(user):
        return None
    if not user.is_superuser:
        n = len(fields)
        # The attribute ModelBackend.get_all_permissions caches its answer in, per request.
        user._perm_cache = {  # type: ignore[attr-defined]
            f"{row[n]}.{row[n + 1]}" for row in rows if row[n] is not None
        }
    return user


def session_user(request: HttpRequest) -> Any:
    """``django.contrib.auth.get_user(request)``, reading the user and its permissions in
    one query when the session was logged in through ``ModelBackend`` and the user model
    is ``User``; every other case is ``get_user`` itself. The session checks are
    ``get_user``'s (Django 5.2), line for line."""
    user_model = get_user_model()
    try:
        user_id = user_model._meta.pk.to_python(request.session[auth.SESSION_KEY])
        backend_path = request.session[auth.BACKEND_SESSION_KEY]
    except KeyError:
        return auth.get_user(request)  # anonymous, as Django decides
    alias = router.db_for_read(User)
    if (
        user_model is not User
        or backend_path not in settings.AUTHENTICATION_BACKENDS
        or not _plain_model_backend(backend_path)
        or alias != router.db_for_read(Permission)
        or _permissions_sql(connections[alias].vendor) is None
    ):
        return auth.get_user(request)
    user = _user_with_permissions(connections[alias], user_id)
    if user is not None:
        # Verify the session, as get_user does.
        session_hash = request.session.get(auth.HASH_SESSION_KEY)
        if not session_hash:
            session_hash_verified = False
        else:
            session_auth_hash = user.get_session_auth_hash()
            session_hash_verified = constant_time_compare(session_hash, session_auth_hash)
        if not session_hash_verified:
            # If the current secret does not verify the session, try with the fallback
            # secrets and stop when a matching one is found.
            if session_hash and any(
                constant_time_compare(session_hash, fallback_auth_hash)
                for fallback_auth_hash in user.get_session_auth_fallback_hash()
            ):
                request.session.cycle_key()
                request.session[auth.HASH_SESSION_KEY] = session_auth_hash
            else:
                request.session.flush()
                user = None
    return user or AnonymousUser()


def request_user(request: HttpRequest) -> Any:
    """The request's user as ``django.contrib.auth.middleware.get_user`` keeps it
    (``request._cached_user``), with its permissions loaded."""
    if not hasattr(request, "_cached_user"):
        request._cached_user = session_user(request)  # type: ignore[attr-defined]
    return permissions_load(request._cached_user)  # type: ignore[attr-defined]


class PermissionsMiddleware:
    """The request's user, when first used, read with its permissions by one query."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.enabled = model_backend_grants()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.enabled and hasattr(request, "session"):
            # As AuthenticationMiddleware's lazy user (the same request._cached_user).
            lazy = SimpleLazyObject(lambda: request_user(request))
            request.user = lazy  # type: ignore[assignment]  # as AuthenticationMiddleware's
        return self.get_response(request)
