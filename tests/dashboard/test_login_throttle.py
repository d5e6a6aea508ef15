"""The login throttle (django-axes, settings in dashboard/settings.py): failed logins per
username and client address, a 429 page once over the limit, and the address taken from
behind a proxy without trusting what the client wrote.

tests/settings.py turns axes off for the rest of the suite (the test client's login()
gives axes no request); every test here turns it back on with the production limits.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db.models import F
from django.test import Client, RequestFactory
from django.urls import reverse

from dashboard.access.login_throttle import client_ip

pytestmark = pytest.mark.django_db

PASSWORD = "right-horse-battery"


@pytest.fixture
def throttle(settings: Any, django_user_model: type[User]) -> int:
    """Axes on, with the production defaults; users ``op`` and ``other``. The limit."""
    settings.AXES_ENABLED = True
    django_user_model.objects.create_user("op", password=PASSWORD)
    django_user_model.objects.create_user("other", password=PASSWORD)
    limit: int = settings.AXES_FAILURE_LIMIT
    assert limit == 5
    assert timedelta(minutes=15) == settings.AXES_COOLOFF_TIME
    return limit


def _login(client: Client, username: str, password: str, **extra: str) -> Any:
    """The test client's response (an HttpResponse with .templates)."""
    return client.post(reverse("login"), {"username": username, "password": password}, **extra)


def _locked_out_text(response: Any) -> str:
    match = re.search(
        r'<section[^>]*id="locked-out"[^>]*>(.*?)</section>', response.content.decode(), re.S
    )
    assert match, response.content.decode()[:500]
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def _fail(client: Client, username: str, times: int, **extra: str) -> list[int]:
    return [_login(client, username, "wrong", **extra).status_code for _ in range(times)]


class LockoutTests:
    def test_limit_failures_then_the_right_password_is_refused_with_429(
        self, client: Client, throttle: int
    ) -> None:
        # Below the limit a failure is the ordinary form error.
        assert _fail(client, "op", throttle - 1) == [200] * (throttle - 1)
        # The failure that reaches the limit is answered with the lockout page.
        last = _login(client, "op", "wrong")
        assert last.status_code == 429
        refused = _login(client, "op", PASSWORD)
        assert refused.status_code == 429
        assert refused["Content-Type"].startswith("text/html")
        assert "registration/locked_out.html" in [t.name for t in refused.templates]
        assert b"Traceback" not in refused.content
        text = _locked_out_text(refused)
        assert text.startswith("Too many failed logins (429)")
        assert "After 5 failed logins for op from this address" in text
        assert "Try again 15 min after the last failed attempt." in text
        assert not _logged_in(client)
        assert client.get(reverse("dashboard:overview")).status_code == 302

    def test_a_locked_out_password_attempt_is_not_recorded(
        self, client: Client, throttle: int
    ) -> None:
        _fail(client, "op", throttle)
        attempt = AccessAttempt.objects.get(username="op")
        before = (attempt.failures_since_start, attempt.attempt_time, len(attempt.post_data))
        for _ in range(3):
            assert _login(client, "op", "guess").status_code == 429
        attempt.refresh_from_db()
        assert (attempt.failures_since_start, attempt.attempt_time, len(attempt.post_data)) == (
            before
        )

    def test_another_user_or_another_address_is_not_affected(
        self, client: Client, throttle: int
    ) -> None:
        _fail(client, "op", throttle)
        assert _login(client, "op", PASSWORD).status_code == 429
        same_address = Client()
        assert _login(same_address, "other", PASSWORD).status_code == 302
        assert _logged_in(same_address)
        elsewhere = Client(REMOTE_ADDR="10.9.8.7")
        assert _login(elsewhere, "op", PASSWORD).status_code == 302
        assert _logged_in(elsewhere)

    def test_a_success_clears_the_failures(self, client: Client, throttle: int) -> None:
        _fail(client, "op", throttle - 1)
        assert _login(client, "op", PASSWORD).status_code == 302
        client.logout()
        assert _fail(client, "op", throttle - 1) == [200] * (throttle - 1)
        assert _login(client, "op", PASSWORD).status_code == 302

    def test_login_works_again_after_the_cool_off(
        self, client: Client, throttle: int, settings: Any
    ) -> None:
        settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
        _fail(client, "op", throttle)
        assert _login(client, "op", PASSWORD).status_code == 429
        # The 1 s cool-off passes: the failed attempts are made 2 s older than they were
        # (django-axes judges the cool-off by its rows' attempt_time).
        assert AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(seconds=2))
        assert _login(client, "op", PASSWORD).status_code == 302
        assert _logged_in(client)

    def test_axes_reset_lifts_the_lockout(self, client: Client, throttle: int) -> None:
        _fail(client, "op", throttle)
        assert _login(client, "op", PASSWORD).status_code == 429
        call_command("axes_reset_username", "op", verbosity=0)
        assert _login(client, "op", PASSWORD).status_code == 302


class BehindProxyTests:
    """One trusted proxy: REMOTE_ADDR is the proxy, which appends the client's address to
    whatever X-Forwarded-For the client sent."""

    PROXY = {"REMOTE_ADDR": "127.0.0.1"}

    def test_a_forged_forwarded_address_does_not_escape_the_lockout(
        self, throttle: int, settings: Any
    ) -> None:
        settings.ACKBOARD_TRUSTED_PROXIES = 1
        guesser = Client(**self.PROXY)
        for n in range(throttle):
            _login(guesser, "op", "wrong", HTTP_X_FORWARDED_FOR=f"6.6.6.{n}, 203.0.113.5")
        refused = _login(guesser, "op", PASSWORD, HTTP_X_FORWARDED_FOR="7.7.7.7, 203.0.113.5")
        assert refused.status_code == 429
        assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.5"}
        # Another client behind the same proxy is a different address.
        colleague = Client(**self.PROXY)
        ok = _login(colleague, "op", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.77")
        assert ok.status_code == 302

    def test_client_address_choice(self, settings: Any) -> None:
        factory = RequestFactory()

        def ip(forwarded: str | None, remote: str = "10.0.0.1") -> str | None:
            extra = {"REMOTE_ADDR": remote}
            if forwarded is not None:
                extra["HTTP_X_FORWARDED_FOR"] = forwarded
            return client_ip(factory.post("/login/", **extra))

        settings.ACKBOARD_TRUSTED_PROXIES = 0  # not behind a proxy: the header is ignored
        assert ip("1.2.3.4") == "10.0.0.1"
        settings.ACKBOARD_TRUSTED_PROXIES = 1
        assert ip("1.2.3.4, 5.6.7.8") == "5.6.7.8"
        assert ip(" 2001:db8::1 ") == "2001:db8::1"
        assert ip(None) == "10.0.0.1"  # the request did not come through the proxy
        assert ip("5.6.7.8, not-an-ip") == "10.0.0.1"
        settings.ACKBOARD_TRUSTED_PROXIES = 2
        assert ip("1.2.3.4, 5.6.7.8, 9.9.9.9") == "5.6.7.8"
        assert ip("9.9.9.9") == "10.0.0.1"
