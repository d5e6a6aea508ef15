"""Browser fixtures: one daphne server and one headless system Chromium per session.

The server uses the session's private test Redis and a migrated SQLite file with one
superuser. Chromium comes from /usr/bin/chromium: if it is missing the tests fail with
how to install it (they never skip). The tests run after every other test (see
tests/conftest.py), because Playwright's sync API runs its own event loop.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests import decoder_samples
from tests.browser.server import (
    HOW_TO_GET_CHROMIUM,
    LiveServer,
    chromium_launch,
    login,
    seed,
    serving,
)


@pytest.fixture(scope="session")
def names(redis_url: str) -> str:
    """Prefix of the browser tests' streams: none on the private server, so the README
    screenshots show plain names; a unique one on a server named by REDIS_TEST_URL."""
    external = os.environ.get("REDIS_TEST_URL") or os.environ.get("VALKEY_URL")
    return f"e2e{uuid.uuid4().hex[:6]}:" if external else ""


@pytest.fixture(scope="session")
def browser_redis(redis_url: str, names: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    yield client
    if names:
        patterns: tuple[str, ...] = (names + "*", "{" + names + "*")
    else:
        seeded = ("orders", "emails", "refunds", "payments")
        patterns = tuple(p for n in seeded for p in (n, "{" + n + "}*"))
    for pattern in patterns:
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)
    client.close()


@pytest.fixture(scope="session")
def seeded(browser_redis: redis.Redis, names: str) -> dict[str, str]:
    """The shop's streams, written before the server starts so its ingestor finds them."""
    return seed(browser_redis, names)


@pytest.fixture(scope="session")
def web_server(
    redis_url: str, names: str, seeded: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    descriptors = decoder_samples.descriptor_set(tmp_path_factory.mktemp("proto") / "set.pb")
    server = LiveServer(
        redis_url=redis_url,
        streams=(names + "*") if names else "*",
        ingest_poll=0.1,
        extra_env={
            # Streams a test adds are listed on the overview within a second.
            "ACKBOARD_INDEX_REFRESH_S": "1",
            # test_decoders_browser's streams; others are "auto", as with no rule.
            "ACKBOARD_DECODERS": f"{names}wire-msgpack=msgpack; "
            f"{names}wire-protobuf#body=protobuf:acme.Payment; "
            f"{names}wire-faststream#__data__=faststream",
            "ACKBOARD_PROTO_DESCRIPTORS": descriptors,
        },
    )
    with serving(server):
        yield server


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path("/usr/bin/chromium").exists():
        pytest.fail(HOW_TO_GET_CHROMIUM, pytrace=False)
    with sync_playwright() as playwright:
        browser = chromium_launch(playwright)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def login_state(chromium: Any, web_server: LiveServer) -> Any:
    """Cookies of one login through the form, reused by every logged-in context (the
    production password hasher makes each login cost about a second)."""
    context = chromium.new_context()
    page = context.new_page()
    login(page, web_server)
    state = context.storage_state()
    context.close()
    return state


@pytest.fixture
def page(chromium: Any, web_server: LiveServer, login_state: Any) -> Iterator[Any]:
    """A logged-in page on the overview, in a fresh browser context, 1280 px wide."""
    context = chromium.new_context(
        viewport={"width": 1280, "height": 860}, storage_state=login_state
    )
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.goto(web_server.url + "/")
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def anonymous_page(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def no_js_page(chromium: Any, web_server: LiveServer, login_state: Any) -> Iterator[Any]:
    """A logged-in page with JavaScript off, 1280 px wide (what the no-JS paths see)."""
    context = chromium.new_context(
        viewport={"width": 1280, "height": 860},
        storage_state=login_state,
        java_script_enabled=False,
    )
    context.set_default_timeout(10_000)
    try:
        yield context.new_page()
    finally:
        context.close()
