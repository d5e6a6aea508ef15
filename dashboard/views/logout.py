"""The logout route: Django's ``LogoutView``, which then says the session ended.

Owns only the message. Ending the session is Django's (the database row is deleted;
sessions never live in Redis), so a logout never answers 503 for a Redis outage. The
message travels in the messages cookie (the session is gone by then) and the login page
shows it. Never talks to Redis itself.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse


class LogoutView(auth_views.LogoutView):
    """``LogoutView`` (POST only, then ``LOGOUT_REDIRECT_URL``) with "You are logged out."."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().post(request, *args, **kwargs)
        messages.success(request, "You are logged out.")
        return response
