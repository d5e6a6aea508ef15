"""Sessions in the database (Django's ``db`` engine, what production runs): a logout
through one client ends the session for every other holder of the cookie, and a logout
while Redis is down or hung ends the session too: nothing of it was ever in Redis."""

from __future__ import annotations

import os
import signal

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard import settings as production
from tests.factories import make_user
from tests.html import element_text
from tests.redis_server import RedisServer, RedisUnavailable
from tests.servers import started

pytestmark = pytest.mark.django_db


def _logged_in(django_user_model: type[User]) -> Client:
    make_user(django_user_model, "olga", "view_queues")
    client = Client()
    assert client.login(username="olga", password="pw")
    return client


def _logout_page(client: Client) -> str:
    """The logout's answer followed to the login page; the flash it shows."""
    response = client.post(reverse("logout"))
    assert response.status_code == 302 and response["Location"] == reverse("login")
    login = client.get(response["Location"])
    assert login.status_code == 200
    return element_text(login.content.decode(), "messages")


def _opens_pages(cookie: str) -> bool:
    other = Client()  # the same cookie, kept by someone else
    other.cookies["sessionid"] = cookie
    page = other.get(reverse("dashboard:failure-search"))
    assert page.status_code in (200, 302), page.status_code
    return page.status_code == 200


class SessionTests:
    def test_production_keeps_sessions_in_the_database(self) -> None:
        assert production.SESSION_ENGINE == "django.contrib.sessions.backends.db"
        assert django_settings.SESSION_ENGINE == production.SESSION_ENGINE

    def test_logout_in_one_client_ends_the_session_in_another(
        self, django_user_model: type[User]
    ) -> None:
        client = _logged_in(django_user_model)
        cookie = client.cookies["sessionid"].value
        assert _opens_pages(cookie)
        assert _logout_page(client) == "You are logged out."
        assert not _opens_pages(cookie)
        assert client.cookies["sessionid"].value == ""  # the cookie is deleted too


class LogoutDuringOutageTests:
    """Logout while the deployment's Redis is down or hung ends the session, and the
    cookie opens nothing once Redis is back."""

    def test_logout_while_redis_is_down(
        self, django_user_model: type[User], settings: SettingsWrapper
    ) -> None:
        with started(RedisServer(), RedisUnavailable) as server:
            settings.ACKBOARD_REDIS_URL = settings.ACKBOARD_CHANNELS_URL = server.url
            client = _logged_in(django_user_model)
            cookie = client.cookies["sessionid"].value
            assert _opens_pages(cookie)
            server.kill()
            assert _logout_page(client) == "You are logged out."
            server.start()
            assert not _opens_pages(cookie)

    def test_logout_while_redis_is_hung(
        self, django_user_model: type[User], settings: SettingsWrapper
    ) -> None:
        with started(RedisServer(), RedisUnavailable) as server:
            assert server.proc is not None
            settings.ACKBOARD_REDIS_URL = settings.ACKBOARD_CHANNELS_URL = server.url
            client = _logged_in(django_user_model)
            cookie = client.cookies["sessionid"].value
            os.kill(server.proc.pid, signal.SIGSTOP)  # accepts connections, never answers
            try:
                assert _logout_page(client) == "You are logged out."
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            assert not _opens_pages(cookie)
