"""Who may do what: the Django permission behind each operator action, and the read role.

Owns the action -> permission map and the decorators views use. It never touches Redis
and never writes audit rows itself: the action views audit a denied attempt through
``dashboard.access.audit`` before answering 403, so a forged POST is both refused and recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase

#: Reading streams, groups, entries, failures and the audit trail.
VIEW_QUEUES = "dashboard.view_queues"

#: One permission per action (Oban Web's habit: every action is named and checked).
#: Delete and Purge share one permission: both destroy dead-lettered entries. The fleet
#: controls share one per kind of power: pausing a group, retiring consumers,
#: administering a group (create, delete, reset its position) and trimming a stream.
ACTION_PERMISSIONS: Mapping[str, str] = {
    "retry": "dashboard.retry_entry",
    "claim": "dashboard.claim_entry",
    "dead-letter": "dashboard.dead_letter_entry",
    "acknowledge": "dashboard.acknowledge_entry",
    "replay": "dashboard.replay_entry",
    "delete": "dashboard.delete_dead_letter",
    "purge": "dashboard.delete_dead_letter",
    "pause": "dashboard.pause_group",
    "resume": "dashboard.pause_group",
    "retire": "dashboard.retire_consumer",
    "retire-idle": "dashboard.retire_consumer",
    "create-group": "dashboard.administer_group",
    "delete-group": "dashboard.administer_group",
    "reset-position": "dashboard.administer_group",
    "trim": "dashboard.trim_stream",
    "redrive": "dashboard.redrive_dead_letters",  # and its controls (dashboard.redrive)
}


#: Actions with a permission above that are not rows of the action table
#: (``dashboard.views.actions.ACTIONS``): a redrive is a background job with its own
#: states and controls (``dashboard.redrive.service``), checked against the same map.
JOB_ACTIONS: frozenset[str] = frozenset({"redrive"})

#: Edit & replay a dead letter: apart from Replay, and held by no role by
#: default (an edited entry runs code paths its producer never sent). Grant it per user
#: in the admin site (docs/failure-loop.md); ``dashboard.views.edit_replay`` checks it.
EDIT_REPLAY = "dashboard.edit_replay_dead_letter"

#: The codenames (without the app label) the "Ackboard operators" group holds.
OPERATOR_CODENAMES: tuple[str, ...] = tuple(
    sorted({p.split(".", 1)[1] for p in ACTION_PERMISSIONS.values()} | {"view_queues"})
)
READ_ONLY_CODENAMES: tuple[str, ...] = ("view_queues",)

V = TypeVar("V", bound=Callable[..., HttpResponseBase])


def action_permission(action: str) -> str:
    """The ``app_label.codename`` that ``action`` needs. Raises KeyError for unknown actions."""
    return ACTION_PERMISSIONS[action]


def may_act(user: User | AnonymousUser, action: str) -> bool:
    """Whether ``user`` may run ``action``; False for unknown actions and anonymous users."""
    permission = ACTION_PERMISSIONS.get(action)
    return bool(permission and user.is_authenticated and user.has_perm(permission))


def queues_view_required(view: V) -> V:
    """Login (redirect) plus the read permission (403) in front of a read view."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.has_perm(VIEW_QUEUES):
            raise PermissionDenied("You may not view queues.")
        return view(request, *args, **kwargs)

    return login_required(wrapper)  # type: ignore[return-value]
