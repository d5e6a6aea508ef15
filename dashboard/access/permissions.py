"""Who may do what: the Django permission behind each operator action, and the read role.

Owns the action -> permission map and the decorators views use. The map is derived: each
row of the action table (``dashboard.views.actions.ACTIONS``) declares its permission and
the table registers them here (``actions_register``), and the background jobs
(``JOB_PERMISSIONS``) declare theirs. The rows' permission rows are created after every
``migrate`` (``dashboard.access.grants``); the jobs' and the read role's are declared on
``AuditEvent.Meta.permissions``. It never
touches Redis and never writes audit rows itself: the action views audit a denied
attempt through ``dashboard.access.audit`` before answering 403, so a forged POST is
both refused and recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import wraps
from types import MappingProxyType
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase

from dashboard.access import scopes

#: Reading streams, groups, entries, failures and the audit trail.
VIEW_QUEUES = "dashboard.view_queues"

#: Actions with a permission that are not rows of the action table: a redrive is a
#: background job with its own states and controls (``dashboard.redrive.service``),
#: checked against the same map.
JOB_PERMISSIONS: Mapping[str, str] = {
    "redrive": "dashboard.redrive_dead_letters",  # and its controls (dashboard.redrive)
}
JOB_ACTIONS: frozenset[str] = frozenset(JOB_PERMISSIONS)

#: Edit & replay a dead letter: apart from Replay, and held by no role by
#: default (an edited entry runs code paths its producer never sent). Grant it per user
#: in the admin site (docs/failure-loop.md); ``dashboard.views.edit_replay`` checks it.
EDIT_REPLAY = "dashboard.edit_replay_dead_letter"

READ_ONLY_CODENAMES: tuple[str, ...] = ("view_queues",)


#: Every action's permission, in the action table's order, then the jobs'. Filled by
#: ``actions_register`` when the action table is built (``dashboard.views.actions``,
#: imported by ``DashboardConfig.ready``); until then only the jobs': fails closed.
_permissions: dict[str, str] = dict(JOB_PERMISSIONS)


def actions_register(permissions: Mapping[str, str]) -> None:
    """The action table's permissions (action name -> ``app_label.codename``), once built.

    One permission per action (Oban Web's habit: every action is named and checked);
    actions of one kind of power share one (Delete and Purge both destroy dead letters).
    The table registers itself, so this module never imports the views.
    """
    _permissions.clear()
    _permissions.update({**permissions, **JOB_PERMISSIONS})


def action_permissions() -> Mapping[str, str]:
    """Every action's permission, in the action table's order, then the jobs'."""
    return MappingProxyType(_permissions)


def operator_codenames() -> tuple[str, ...]:
    """The codenames (without the app label) the "Ackboard operators" group holds on a
    fresh database (the migrations' and ``dashboard.access.grants``' grants)."""
    codes = {p.split(".", 1)[1] for p in action_permissions().values()}
    return tuple(sorted(codes | {"view_queues"}))


def __getattr__(name: str) -> Mapping[str, str]:
    """``ACTION_PERMISSIONS``: ``action_permissions()``, for ``from … import``."""
    if name == "ACTION_PERMISSIONS":
        return action_permissions()
    raise AttributeError(name)


V = TypeVar("V", bound=Callable[..., HttpResponseBase])


def action_permission(action: str) -> str:
    """The ``app_label.codename`` that ``action`` needs. Raises KeyError for unknown actions."""
    return action_permissions()[action]


def may_act(user: User | AnonymousUser, action: str, stream: str | None = None) -> bool:
    """Whether ``user`` may run ``action`` on ``stream`` (on some stream when None: what a
    check before the request's input is read asks); False for unknown actions and
    anonymous users. A role's stream patterns decide the streams (``access.scopes``)."""
    permission = action_permissions().get(action)
    if not (permission and user.is_authenticated and user.has_perm(permission)):
        return False
    return stream is None or scopes.may(user, permission, stream)


def queues_view_required(view: V) -> V:
    """Login (redirect) plus the read permission (403) in front of a read view."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.has_perm(VIEW_QUEUES):
            raise PermissionDenied("You may not view queues.")
        return view(request, *args, **kwargs)

    return login_required(wrapper)  # type: ignore[return-value]
