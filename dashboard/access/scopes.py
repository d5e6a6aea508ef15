"""Where a user's permissions apply: the streams each role reaches.

A role is a Django group. A group with no ``StreamScope`` rows grants its permissions on
every stream, as before scopes existed, so a deployment that configures none works
unchanged. A group with scopes grants its permissions only on the streams one of its
patterns matches (``orders:*``, ``billing:invoices``; ``*`` is any run of characters,
``?`` one character, everything else is literal and case-sensitive, as stream names are).
A user's own permissions (the admin's "user permissions") and a superuser's apply
everywhere. A user may do X on stream S when some grant of X reaches S; reading is
``dashboard.view_queues``.

Owns ``Access`` (a user's grants, as a frozenset of strings a live rendering can be keyed
by: ``"dashboard.retry_entry"`` everywhere, ``"dashboard.retry_entry@orders:*"`` on one
pattern), and how grants are read from SQL for one user or many. A pattern's syntax and
its one translation into a regular expression that Python and the database both use are
``dashboard.display.stream_patterns``' (re-exported here), so a page filtered in memory
and one filtered in SQL agree. Never touches Redis.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from django import db
from django.contrib.auth.context_processors import PermWrapper
from django.contrib.auth.models import Permission
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

from dashboard.display.stream_patterns import MAX_PATTERN as MAX_PATTERN
from dashboard.display.stream_patterns import matcher as _matcher
from dashboard.display.stream_patterns import pattern_check as pattern_check
from dashboard.display.stream_patterns import pattern_regex as pattern_regex
from dashboard.runtime.middleware import RedisErrorMiddleware

APP = "dashboard"
VIEW_QUEUES = "dashboard.view_queues"
#: Between a permission and the pattern it is granted on, in a grant.
AT = "@"


@dataclass(frozen=True)
class Access:
    """What one user may do where. ``grants`` holds ``perm`` (everywhere) or
    ``perm@pattern`` (on the streams the pattern matches)."""

    grants: frozenset[str]
    _by_perm: dict[str, tuple[str, ...] | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def patterns(self, perm: str) -> tuple[str, ...] | None:
        """The patterns ``perm`` is granted on: None when it is granted everywhere."""
        if perm in self.grants:
            return None
        if perm not in self._by_perm:
            prefix = perm + AT
            self._by_perm[perm] = tuple(
                sorted(g[len(prefix) :] for g in self.grants if g.startswith(prefix))
            )
        return self._by_perm[perm]

    def anywhere(self, perm: str) -> bool:
        """Whether ``perm`` is granted on some stream (what a page with no stream asks)."""
        return self.patterns(perm) != ()

    def everywhere(self, perm: str) -> bool:
        return perm in self.grants

    def may(self, perm: str, stream: str) -> bool:
        """Whether ``perm`` reaches ``stream``."""
        patterns = self.patterns(perm)
        return patterns is None or bool(patterns and _matcher(patterns)(stream))

    def reads(self, stream: str) -> bool:
        return self.may(VIEW_QUEUES, stream)

    def reach(self) -> tuple[str, ...] | None:
        """The patterns of the streams this user may read; None: every stream."""
        return self.patterns(VIEW_QUEUES)

    def on(self, stream: str) -> frozenset[str]:
        """The plain permissions that reach ``stream`` (what its page renders with)."""
        perms = {g.split(AT, 1)[0] for g in self.grants}
        return frozenset(p for p in perms if self.may(p, stream))

    def unscoped(self) -> frozenset[str]:
        """The permissions granted everywhere."""
        return frozenset(g for g in self.grants if AT not in g)


def reach_filter(reach: tuple[str, ...] | None) -> Callable[[str], bool] | None:
    """A predicate over stream names for ``reach`` (None: every stream, no filter)."""
    if reach is None:
        return None
    if not reach:
        return lambda name: False
    match = _matcher(reach)
    return lambda name: match(name) is not None


def reach_names(reach: tuple[str, ...] | None, names: Iterable[str]) -> list[str]:
    """``names`` that ``reach`` lets a user read, in their order."""
    names = list(names)
    keep = reach_filter(reach)
    return names if keep is None else [n for n in names if keep(n)]


def reach_q(reach: tuple[str, ...] | None, field_name: str = "stream") -> Q | None:
    """A SQL condition on ``field_name`` for ``reach``; None when every stream is read."""
    if reach is None:
        return None
    if not reach:
        return Q(pk__in=[])
    q = Q()
    for p in reach:
        if "*" in p or "?" in p:
            q |= Q(**{f"{field_name}__regex": pattern_regex(p)})
        else:
            q |= Q(**{field_name: p})
    return q


# --- reading grants from SQL ---------------------------------------------------------------


def _grants_of(user_ids: Collection[Any], superusers: Collection[Any]) -> dict[Any, set[str]]:
    """Each user's grants: their own permissions and unscoped groups' everywhere, scoped
    groups' on each pattern, a superuser every ``dashboard`` permission everywhere. Three
    queries whatever the number of users (four with a superuser)."""
    from dashboard.models import StreamScope  # the models import this module's checks

    ids = list(user_ids)
    grants: dict[Any, set[str]] = {pk: set() for pk in ids}
    mine = Permission.objects.filter(user__in=ids, content_type__app_label=APP)
    for pk, codename in mine.values_list("user", "codename"):
        grants[pk].add(f"{APP}.{codename}")
    theirs = Permission.objects.filter(group__user__in=ids, content_type__app_label=APP)
    by_group: dict[Any, set[str]] = {}
    members: dict[Any, set[Any]] = {}
    for pk, group, codename in theirs.values_list("group__user", "group", "codename"):
        by_group.setdefault(group, set()).add(f"{APP}.{codename}")
        members.setdefault(group, set()).add(pk)
    scopes: dict[Any, list[str]] = {}
    for group, pattern in StreamScope.objects.filter(group__in=list(by_group)).values_list(
        "group", "pattern"
    ):
        scopes.setdefault(group, []).append(pattern)
    for group, perms in by_group.items():
        patterns = scopes.get(group)
        given = perms if patterns is None else {f"{p}{AT}{s}" for p in perms for s in patterns}
        for pk in members[group]:
            grants[pk] |= given
    if superusers:
        every = {
            f"{APP}.{c}"
            for c in Permission.objects.filter(content_type__app_label=APP).values_list(
                "codename", flat=True
            )
        }
        for pk in superusers:
            grants[pk] = set(every)
    return grants


def grants_many(user_ids: Collection[Any], superusers: Collection[Any]) -> dict[Any, Perms]:
    """``access_of(user).grants`` for many active users at once (the live sockets' check)."""
    return {pk: frozenset(g) for pk, g in _grants_of(user_ids, superusers).items()}


Perms = frozenset[str]


def access_of(user: Any) -> Access:
    """The user's grants, read once per user object (a request's user lives one request,
    like Django's own permission cache). Anonymous and inactive users have none."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Access(frozenset())
    cached = getattr(user, "_ackboard_access", None)
    if cached is None:
        from dashboard.models import StreamScope

        if user.is_superuser or StreamScope.objects.filter(group__user=user).exists():
            supers = [user.pk] if user.is_superuser else []
            cached = Access(frozenset(_grants_of([user.pk], supers)[user.pk]))
        else:  # no scope: Django's own permissions (cached on the user), everywhere
            perms = user.get_all_permissions()
            cached = Access(frozenset(p for p in perms if p.startswith(APP + ".")))
        user._ackboard_access = cached
    return cached


def may(user: Any, perm: str, stream: str) -> bool:
    """Whether ``user`` holds ``perm`` on ``stream``."""
    return access_of(user).may(perm, stream)


def reads(user: Any, stream: str) -> bool:
    return access_of(user).reads(stream)


# --- pages: a stream's page renders with what reaches its stream --------------------------


class PermsUser:
    """Stands in for a user in templates' ``perms`` where only a permission set counts:
    a stream's page (the permissions that reach the stream) and a live rendering (one
    for everyone with the same set)."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, perms: Perms) -> None:
        self._perms = perms

    def has_perm(self, perm: str, obj: object = None) -> bool:
        return perm in self._perms

    def has_perms(self, perm_list: Iterable[str], obj: object = None) -> bool:
        return all(p in self._perms for p in perm_list)

    def has_module_perms(self, app_label: str) -> bool:
        return any(p.startswith(app_label + ".") for p in self._perms)

    def get_username(self) -> str:
        return ""


def _page_user(request: HttpRequest) -> Any:
    return getattr(request, "user", None)


class StreamScopeMiddleware(MiddlewareMixin):
    """A read of a stream's URL by a user whose roles read other streams only answers 404,
    as for a stream that does not exist (its name is not confirmed); the stream is noted on
    the request (``ackboard_stream``) for ``stream_perms``. A POST goes on to its action,
    which checks the action's own permission on the stream and audits a refusal. A user
    who may read no stream at all gets the view's own 403."""

    def process_view(
        self, request: HttpRequest, view: Any, args: Any, kwargs: dict[str, Any]
    ) -> HttpResponse | None:
        stream = kwargs.get("stream")
        if not isinstance(stream, str):
            return None
        request.ackboard_stream = stream  # type: ignore[attr-defined]
        user = _page_user(request)
        if request.method not in ("GET", "HEAD") or user is None:
            return None
        try:
            access = access_of(user)
        except (db.OperationalError, db.InterfaceError) as exc:  # the database is down
            return RedisErrorMiddleware.database_down(request, exc)
        if access.anywhere(VIEW_QUEUES) and not access.reads(stream):
            raise Http404("No such stream.")
        return None


def stream_perms(request: HttpRequest) -> dict[str, Any]:
    """A context processor after Django's ``auth``: on a stream's page ``perms`` holds the
    permissions that reach that stream, so its buttons are those the user may press."""
    stream = getattr(request, "ackboard_stream", None)
    user = _page_user(request)
    if stream is not None and user is not None and user.is_authenticated:
        return {"perms": PermWrapper(PermsUser(access_of(user).on(stream)))}
    return {}
