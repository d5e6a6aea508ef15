"""The redrive's routes: the dialog's dry run and start, the job's controls, the JSON API.

Owns ``patterns()`` (added to ``dashboard.urls``): POST ``streams/<s>/dlq/redrive/``
(``dry_run``: the count, nothing changed; ``confirm=1``: start the job), POST
``redrive/<job>/<control>/`` (pause, resume, continue, stop, cancel), GET
``redrive/<job>/`` (the job as JSON, for polling scripts), and the token API
``api/v1/redrive`` (a JSON body: ``stream`` plus the dialog's fields; without
``"confirm": true`` a dry run) and ``api/v1/redrive/<job>/<control>``. Everything goes
through ``dashboard.redrive.service`` (permission, input, audit); these views only turn
its ``RedriveAnswer`` into HTML, a redirect or JSON. CSRF: the session routes keep Django's
CSRF check (htmx sends the page's token); the API routes are token-only like
``dashboard.views.api``. Costs: the service's.
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.urls import URLPattern, path, re_path, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from dashboard.access.permissions import VIEW_QUEUES
from dashboard.redrive import service
from dashboard.redrive.models import RedriveJob
from dashboard.runtime.connection import get_redis
from dashboard.views.action_runner import BadRequest
from dashboard.views.api import _body, api_view  # the API's own auth and body rules
from dashboard.views.remote import Answer
from queue_core.events import event_publish


def _answer(request: HttpRequest, outcome: service.RedriveAnswer, *, stream: str) -> HttpResponse:
    """htmx: the dialog's answer fragment (a 2xx start or control also reloads the page,
    its message carried there by the session, shown in the page's messages as an action's
    is); a plain form: back to the dead-letter page with its message (a refusal as text)."""
    html = render_to_string("dashboard/_redrive_answer.html", {"outcome": outcome})
    if request.headers.get("HX-Request"):
        response = HttpResponse(html, status=outcome.status)
        if outcome.ok and outcome.job is not None:
            response["HX-Refresh"] = "true"
            messages.success(request, outcome.message)
        return response
    if outcome.ok:
        messages.success(request, outcome.message)
        return redirect(reverse("dashboard:dlq", args=[stream]))
    return HttpResponse(html, status=outcome.status)


def _wake(stream: str) -> None:
    """Tell the live pages (any web process) that the stream's redrive changed."""
    event_publish(client=get_redis(), type="action", stream=stream, action="redrive", ids=[])


@never_cache
@login_required
@require_POST
def redrive_start(request: HttpRequest, stream: str) -> HttpResponseBase:
    if not request.user.has_perm(VIEW_QUEUES):
        raise PermissionDenied("You may not view queues.")
    confirm = request.POST.get("confirm") == "1"
    outcome = service.redrive(user=request.user, client=get_redis(), stream=stream,
                              data=request.POST, confirm=confirm)  # fmt: skip
    if outcome.ok and outcome.job is not None:
        _wake(stream)
    return _answer(request, outcome, stream=stream)


@never_cache
@login_required
@require_POST
def redrive_control(request: HttpRequest, job_id: str, action: str) -> HttpResponseBase:
    outcome = service.control(user=request.user, job_id=job_id, action=action)
    job = outcome.job or service.job_find(service.job_pk(job_id))
    if outcome.ok and job is not None:
        _wake(job.stream)
    return _answer(request, outcome, stream=job.stream if job else "")


@never_cache
@login_required
@require_GET
def redrive_status(request: HttpRequest, job_id: int) -> JsonResponse:
    if not request.user.has_perm(VIEW_QUEUES):
        raise PermissionDenied("You may not view queues.")
    job = RedriveJob.objects.filter(pk=job_id).first()
    if job is None:
        return JsonResponse({"ok": False, "message": f"no redrive job #{job_id}"}, status=404)
    return JsonResponse({"ok": True, "job": service.job_json(job)})


def _api_answer(outcome: service.RedriveAnswer) -> Answer:
    return Answer(outcome.status, outcome.payload())


@api_view("POST")
def api_redrive(request: HttpRequest, *, user: User) -> Answer:
    if not service.may_redrive(user):  # permission before input: the service's audited 403
        named = ""
        with contextlib.suppress(BadRequest):
            given = _body(request).get("stream")
            named = given if isinstance(given, str) else ""
        return _api_answer(service.redrive(user=user, client=get_redis(), stream=named,
                                           data={}, confirm=False, channel="api"))  # fmt: skip
    body: dict[str, Any] = _body(request)
    stream = body.get("stream")
    if not isinstance(stream, str) or not stream:
        return Answer(400, {"ok": False, "message": '"stream" is required'})
    outcome = service.redrive(user=user, client=get_redis(), stream=stream, data=body,
                              confirm=body.get("confirm") is True, channel="api")  # fmt: skip
    return _api_answer(outcome)


@api_view("POST")
def api_redrive_control(request: HttpRequest, job_id: str, action: str, *, user: User) -> Answer:
    return _api_answer(service.control(user=user, job_id=job_id, action=action, channel="api"))


def patterns() -> list[URLPattern]:
    """The routes (built when urls.py has registered its converters)."""
    return [
        path("streams/<name:stream>/dlq/redrive/", redrive_start, name="redrive-start"),
        path("redrive/<int:job_id>/", redrive_status, name="redrive-status"),
        # Any job id and control reach the view: a user who may not redrive gets 403 for
        # each, before the id is looked at (dashboard.redrive.service.control).
        path("redrive/<str:job_id>/<str:action>/", redrive_control, name="redrive-control"),
        re_path(r"^api/v1/redrive/?$", api_redrive, name="api-redrive"),
        re_path(
            r"^api/v1/redrive/(?P<job_id>[^/]+)/(?P<action>[^/]+)/?$",
            api_redrive_control,
            name="api-redrive-control",
        ),
    ]
