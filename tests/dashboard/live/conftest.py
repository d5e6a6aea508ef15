"""Fixtures of the live tests: settings on the private Redis, the process's broadcaster
(stopped after each test), and login-session headers for users with given permissions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Permission
from django.test import Client

from dashboard.live.broadcaster import Broadcaster, get_broadcaster
from tests.dashboard.live.sockets import SITE_HEADERS, CookieFor


@pytest.fixture
def live_settings(settings: Any, redis_url: str, prefix: str) -> Any:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_LIVE_TICK = 0.1
    return settings


@pytest_asyncio.fixture
async def broadcaster(live_settings: Any) -> AsyncIterator[Broadcaster]:
    b = get_broadcaster()
    yield b
    await b.stop()


@pytest.fixture
def headers_for(django_user_model: Any) -> CookieFor:
    """Login-session headers (cookie + same-site origin) for a new user with ``perms``.

    Awaitable, because the tests are async and the database is sync.
    """
    counter = iter(range(1000))

    def make(*perms: str) -> list[tuple[bytes, bytes]]:
        user = django_user_model.objects.create_user(f"live{next(counter)}", password="pw")
        for codename in perms:
            user.user_permissions.add(
                Permission.objects.get(content_type__app_label="dashboard", codename=codename)
            )
        client = Client()
        client.force_login(user)
        cookie = f"sessionid={client.cookies['sessionid'].value}"
        return [(b"cookie", cookie.encode()), *SITE_HEADERS]

    return sync_to_async(make)
