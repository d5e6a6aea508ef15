"""The JSON API: every operator action for scripts, as a token's user.

Owns the ``/api/v1/`` routes: authentication by a per-user token
(``Authorization: Bearer ackb_…``, see ``dashboard.access.api_tokens``), parsing a JSON body
into the fields a button posts, and JSON answers with their status codes: 400 bad input,
401 no or bad token, 403 no permission, 404 unknown action, stream, group or entry, 405
wrong method, 409 changed or refused by a guard, 503 Redis or the database down. Never
HTML, never a 500 for any of these. The action itself goes through
``dashboard.views.remote`` into the buttons' runner: the same permission, form, guard,
service call and audit row, naming the token's user and the channel "api".

CSRF: these views are ``csrf_exempt``, and that is safe because they never look at the
session. The only credential is the bearer token, which a browser never attaches by
itself; a request carrying only a session cookie is a 401 here. So a forged cross-site
request has nothing to ride on, which is the attack CSRF tokens prevent. Every other
route keeps CSRF (``tests/dashboard/test_safety.py`` checks both).

It never talks to Redis or writes audit rows itself. Costs: one token SELECT (and at
most one UPDATE a minute), then the action's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any

import redis
from django.contrib.auth.models import User
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from dashboard.access.api_tokens import token_authenticate
from dashboard.access.permissions import EDIT_REPLAY, action_permissions, may_act
from dashboard.access.scopes import may
from dashboard.runtime.middleware import redis_problem
from dashboard.views.action_runner import BadRequest
from dashboard.views.actions import ACTIONS
from dashboard.views.edit_replay import FieldChanges
from dashboard.views.produce import produce_rows
from dashboard.views.remote import (
    Answer,
    Fields,
    action_answer,
    bulk_answer,
    edit_replay_answer,
    refusal,
)
from queue_core.bounded_json import BoundedJSONError, json_read
from queue_core.errors import invalid_id

#: Body keys that name the target; every other key is a form field of the action.
TARGET_KEYS = ("stream", "group", "id")
#: Body keys that are lists of strings: entry ids (bulk), consumer names (Retire idle).
LIST_KEYS = ("ids", "names")

ApiView = Callable[..., Answer]


def _respond(answer: Answer) -> JsonResponse:
    response = JsonResponse(answer.payload, status=answer.status)
    if answer.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="ackboard"'
    return response


def _token_user(request: HttpRequest) -> User | None:
    """The user of the request's live bearer token; None without one. Never the session."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    row = token_authenticate(token.strip())
    return row.user if row is not None else None


def _body(request: HttpRequest) -> dict[str, Any]:
    """The JSON object posted; {} for an empty body."""
    try:
        raw = request.body
    except RequestDataTooBig:
        raise BadRequest("the request body is too large") from None
    if not raw.strip():
        return {}
    try:
        # No size bound of its own: Django's DATA_UPLOAD_MAX_MEMORY_SIZE bounds the body.
        body = json_read(raw, max_size=None)
    except BoundedJSONError as exc:
        raise BadRequest(f"the body must be a JSON object (it is {exc})") from None
    except ValueError:
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key, "")
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{key} is required (a string)")
    return value


def _given(body: dict[str, Any], key: str) -> str:
    """A target key as given, "" when absent or not a string: what a denied request's
    audit row names (its input is never judged)."""
    value = body.get(key, "")
    return value if isinstance(value, str) else ""


def _denied_input(request: HttpRequest) -> tuple[dict[str, Any], Fields]:
    """The body and fields of a request whose user may not run its action, as far as
    they can be read: a body or field that is not valid is left out rather than a 400,
    so the answer is the 403 (permission is decided before input)."""
    try:
        body = _body(request)
    except BadRequest:
        return {}, {}
    try:
        return body, _fields(body)
    except BadRequest:
        return body, {}


def _fields(body: dict[str, Any]) -> Fields:
    """The button's form fields from the body: text as is, numbers as digits, true as
    "1" (``confirm``), ``ids`` and ``names`` as lists of strings."""
    fields: dict[str, str | list[str]] = {}
    for key, value in body.items():
        if key in TARGET_KEYS or value is None:
            continue
        if key in LIST_KEYS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise BadRequest(f"{key} must be a list of strings")
            fields[key] = value
        elif isinstance(value, bool):
            fields[key] = "1" if value else ""
        elif isinstance(value, int | str):
            fields[key] = str(value)
        else:
            raise BadRequest(f"{key} must be a string, a whole number or a boolean")
    return fields


def api_view(method: str) -> Callable[[ApiView], Callable[..., JsonResponse]]:
    """Token auth, the method, bad input and Redis errors as JSON around an API view,
    which returns an ``Answer`` for the token's user (passed as ``user``)."""

    def decorate(view: ApiView) -> Callable[..., JsonResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
            if request.method != method:
                response = _respond(refusal(405, f"use {method}"))
                response["Allow"] = method
                return response
            try:
                user = _token_user(request)
            except DatabaseError:
                return _respond(refusal(503, "the database is unavailable; nothing was done"))
            if user is None:
                return _respond(refusal(401, "a valid API token is required (Bearer)"))
            try:
                return _respond(view(request, *args, user=user, **kwargs))
            except DatabaseError:
                # The audit row is written after the action: it may have run unrecorded.
                return _respond(
                    refusal(503, "the database is unavailable; the action may have run unaudited")
                )
            except BadRequest as exc:
                return _respond(refusal(exc.status, str(exc)))
            except redis.ResponseError as exc:
                if invalid_id(exc):
                    return _respond(refusal(400, f"Redis rejected an id in that request: {exc}"))
                return _respond(refusal(503, redis_problem(exc)))
            except redis.RedisError as exc:
                # A write that timed out may still have run: no promise that nothing did.
                return _respond(refusal(503, redis_problem(exc)))

        return csrf_exempt(never_cache(wrapper))

    return decorate


@api_view("POST")
def api_action(request: HttpRequest, action: str, *, user: User) -> Answer:
    """One action on one entry, dead letter, dead-letter stream, group, consumer or
    stream. Body: ``stream``, ``group``, ``id`` (an entry's or a dead letter's) and
    ``consumer`` (Retire's) as the action needs, then the fields its button posts."""
    row = ACTIONS.get(action)
    if row is None:
        return refusal(404, f"no action {action!r} (one of {', '.join(ACTIONS)})")
    # Permission before input: a user who may not run it gets the runner's audited 403.
    if may_act(user, action):
        body = _body(request)
        text, fields = _text, _fields(body)
    else:
        body, fields = _denied_input(request)
        text = _given
    stream = text(body, "stream")
    group = text(body, "group") if row.on in ("pending", "group", "consumer") else ""
    if row.on in ("pending", "dead-letter", "entry"):
        target_id = text(body, "id")
    elif row.on == "consumer":
        target_id = text(body, "consumer")
    else:
        target_id = ""
    return action_answer(
        user=user,
        action=action,
        stream=stream,
        group=group,
        target_id=target_id,
        fields=fields,
        channel="api",
    )


@api_view("POST")
def api_edit_replay(request: HttpRequest, *, user: User) -> Answer:
    """Edit & replay a dead letter. Body: ``stream``, ``id`` (the dead letter's), then
    ``set`` (an object: field name to text), ``set_json`` (field name to a JSON value),
    ``drop`` (a list of names), ``force`` and ``reason``; every other field is kept."""
    body, _ = _denied_input(request)  # a denied user's answer is the audited 403
    stream, dlq_id = _given(body, "stream"), _given(body, "id")
    changes = FieldChanges(set={}, set_json={}, drop=())
    if may(user, EDIT_REPLAY, stream):
        body = _body(request)
        stream, dlq_id = _text(body, "stream"), _text(body, "id")
        changes = _changes(body)
    fields = {"reason": _given(body, "reason"), "force": "1" if body.get("force") is True else ""}
    return edit_replay_answer(user=user, stream=stream, dlq_id=dlq_id, changes=changes,
                              fields=fields, channel="api")  # fmt: skip


def _changes(body: dict[str, Any]) -> FieldChanges:
    """``set``, ``set_json`` and ``drop`` of an edit & replay body, checked for shape."""
    sets, documents, drop = body.get("set", {}), body.get("set_json", {}), body.get("drop", [])
    if not isinstance(sets, dict) or not all(isinstance(v, str) for v in sets.values()):
        raise BadRequest("set must be an object of field names to text")
    if not isinstance(documents, dict):
        raise BadRequest("set_json must be an object of field names to JSON values")
    if not isinstance(drop, list) or not all(isinstance(v, str) for v in drop):
        raise BadRequest("drop must be a list of field names")
    as_text = {name: json.dumps(value, ensure_ascii=False) for name, value in documents.items()}
    return FieldChanges(set=sets, set_json=as_text, drop=drop)


@api_view("POST")
def api_produce(request: HttpRequest, *, user: User) -> Answer:
    """Produce an entry. Body: ``stream``, ``set`` (an object: field name to text),
    ``set_json`` (field name to a JSON value), ``create``, ``reason``; without
    ``"confirm": true`` the dry run. The rows reach the Produce row as its page posts
    them (``produce_rows``)."""
    body, _ = _denied_input(request)  # a denied user's answer is the audited 403
    stream = _given(body, "stream")
    rows: dict[str, list[str]] = {}
    if may_act(user, "produce", stream or None):
        body = _body(request)
        stream = _text(body, "stream")
        changes = _changes({k: v for k, v in body.items() if k in ("set", "set_json")})
        rows = produce_rows(changes)
    fields: dict[str, str | list[str]] = {**rows, "reason": _given(body, "reason")}
    for flag in ("confirm", "create"):
        fields[flag] = "1" if body.get(flag) is True else ""
    return action_answer(user=user, action="produce", stream=stream, fields=fields, channel="api")


@api_view("POST")
def api_bulk(request: HttpRequest, action: str, *, user: User) -> Answer:
    """A bulk action: a dry run, or with ``"confirm": true`` one capped step. Body:
    ``stream``, ``group``, then ``ids`` or a filter (``scope: "filter"``, ``consumer``,
    ``min_idle_ms``, ``fingerprint``), ``snapshot_id``, ``cursor``, ``done_before``, ``reason``."""
    if may_act(user, action):
        body = _body(request)
        text, fields = _text, _fields(body)
    else:  # permission before input, as api_action (an unknown action stays a 404)
        body, fields = _denied_input(request)
        text = _given
    return bulk_answer(
        user=user,
        action=action,
        stream=text(body, "stream"),
        group=text(body, "group"),
        fields=fields,
        channel="api",
    )


@api_view("GET")
def api_whoami(request: HttpRequest, *, user: User) -> Answer:
    """Whose the token is and which actions they may run: a script's first check."""
    allowed = [name for name in action_permissions() if may_act(user, name)]
    message = f"{user.get_username()} may " + (", ".join(allowed) or "run no action")
    return Answer(
        200, {"ok": True, "user": user.get_username(), "actions": allowed, "message": message}
    )


@csrf_exempt
def api_not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Any other ``/api/`` path: a JSON 404, not the HTML page."""
    return _respond(refusal(404, "no such API route (see /api/v1/actions/<action>)"))
