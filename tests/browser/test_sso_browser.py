"""Single sign-on through a real OpenID Connect provider, in the browser.

The provider is panva's oidc-provider on loopback (tests/access/oidc_provider.py), with
its own login and consent pages; Ackboard is the production server with SSO on, local
passwords off and a session renewal every 3 seconds. Nothing of the protocol is mocked:
the browser follows the real redirects, Ackboard exchanges the code, checks the signed ID
token and reads the userinfo over HTTP.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

import pytest
from playwright.sync_api import expect

from tests.access.oidc_provider import OidcProvider, ProviderFailed
from tests.browser.server import LiveServer, log_problems, serving
from tests.redis_server import free_port

pytestmark = pytest.mark.browser

PROVIDER_NAME = "Test IdP"


@pytest.fixture(scope="module")
def sso(redis_url: str, names: str, seeded: dict[str, str]) -> Iterator[tuple[LiveServer, Any]]:
    port = free_port()
    provider = OidcProvider(redirect_uri=f"http://127.0.0.1:{port}/oidc/callback/")
    try:
        provider.start()
    except ProviderFailed as exc:
        pytest.fail(str(exc), pytrace=False)
    server = LiveServer(
        redis_url=redis_url,
        streams=(names + "*") if names else "*",
        port=port,
        extra_env={
            "ACKBOARD_OIDC_ISSUER": provider.issuer,
            "ACKBOARD_OIDC_CLIENT_ID": provider.client_id,
            "ACKBOARD_OIDC_CLIENT_SECRET": provider.client_secret,
            "ACKBOARD_OIDC_PROVIDER_NAME": PROVIDER_NAME,
            "ACKBOARD_OIDC_SCOPES": "openid email profile groups",
            "ACKBOARD_OIDC_ROLES": "ackboard-operators=operator,ackboard-viewers=read-only",
            "ACKBOARD_OIDC_RENEW_MINUTES": "0.05",
            "ACKBOARD_LOCAL_LOGIN": "0",
        },
    )
    try:
        with serving(server):
            yield server, provider
    finally:
        provider.stop()


@pytest.fixture
def context(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(10_000)
    try:
        yield context
    finally:
        context.close()


def _sign_in(
    page: Any, server: LiveServer, provider: OidcProvider, user: str, *, consent: bool = True
) -> None:
    """From Ackboard's login page through the provider's login page and (unless told
    otherwise) its consent page."""
    page.goto(server.url + "/login/")
    page.get_by_role("link", name=f"Log in with {PROVIDER_NAME}").click()
    page.wait_for_url(re.compile(re.escape(provider.issuer) + "/interaction/"))
    page.fill("input[name=login]", user)
    page.fill("input[name=password]", "any password")
    page.locator("button[type=submit]").click()
    button = page.locator("button[type=submit]", has_text=re.compile("continue", re.I))
    if consent:
        button.click()
    else:
        expect(button).to_be_visible()


def _group_url(server: LiveServer, names: str) -> str:
    return f"{server.url}/streams/{names}orders/groups/billing/"


def _db(server: LiveServer, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(server.workdir / "db.sqlite3") as db:
        return db.execute(sql, args).fetchall()


class SsoLoginTests:
    def test_operator_signs_in_and_may_act(
        self, sso: tuple[LiveServer, OidcProvider], context: Any, names: str
    ) -> None:
        server, provider = sso
        mark = server.log_mark()
        page = context.new_page()
        _sign_in(page, server, provider, "olivia")
        page.wait_for_url(server.url + "/")
        page.goto(_group_url(server, names))
        expect(page.get_by_role("button", name="Retry…")).to_have_count(1)
        # The login is audited as a password login is: axes's access log names the user.
        logins = _db(
            server, "SELECT username FROM axes_accesslog WHERE username = ?", "olivia@example.com"
        )
        assert logins
        groups = _db(
            server,
            "SELECT g.name FROM auth_group g JOIN auth_user_groups ug ON ug.group_id = g.id "
            "JOIN auth_user u ON u.id = ug.user_id WHERE u.username = ?",
            "olivia@example.com",
        )
        assert groups == [("Ackboard operators",)]

        page.get_by_role("button", name="Log out").click()
        page.wait_for_url(server.url + "/login/")
        page.goto(_group_url(server, names))
        assert urlsplit(page.url).path == "/login/"
        assert log_problems(server.log_since(mark)) == []

    def test_viewer_sees_no_action(
        self, sso: tuple[LiveServer, OidcProvider], context: Any, names: str
    ) -> None:
        server, provider = sso
        page = context.new_page()
        _sign_in(page, server, provider, "victor")
        page.wait_for_url(server.url + "/")
        page.goto(_group_url(server, names))
        expect(page.locator("#pending-table, table").first).to_be_visible()
        expect(page.get_by_role("button", name="Retry…")).to_have_count(0)

    def test_user_without_a_mapped_group_is_refused(
        self, sso: tuple[LiveServer, OidcProvider], context: Any
    ) -> None:
        server, provider = sso
        mark = server.log_mark()
        page = context.new_page()
        _sign_in(page, server, provider, "nora")
        expect(page.locator("#sso-refused")).to_contain_text("no group that has a role")
        page.goto(server.url + "/")
        assert urlsplit(page.url).path == "/login/"
        # Recorded as a refused password login is: a failed attempt under the user's name.
        failures = _db(
            server, "SELECT failures_since_start FROM axes_accessattempt WHERE username = ?",
            "nora@example.com",
        )  # fmt: skip
        assert failures == [(1,)]
        assert log_problems(server.log_since(mark)) == []

    def test_tampered_state_is_refused(
        self, sso: tuple[LiveServer, OidcProvider], context: Any
    ) -> None:
        server, provider = sso
        mark = server.log_mark()
        page = context.new_page()
        _sign_in(page, server, provider, "olivia", consent=False)
        # The consent form sent by hand (the context's cookies), its redirects followed up
        # to the provider's answer: Playwright cannot rewrite a redirect the browser follows.
        url, fields = page.evaluate(
            "() => { const f = document.querySelector('button[type=submit]').form;"
            " return [f.action, Object.fromEntries(new FormData(f))]; }"
        )
        response = page.request.post(url, form=fields, max_redirects=0)
        while not response.headers["location"].startswith(server.url):
            response = page.request.get(
                urljoin(provider.issuer, response.headers["location"]), max_redirects=0
            )
        answer = urlsplit(response.headers["location"])
        query = dict(parse_qsl(answer.query))
        assert query["code"] and query["state"]
        query["state"] = "forged-" + query["state"]
        page.goto(answer._replace(query=urlencode(query)).geturl())
        expect(page.locator("#sso-refused")).to_contain_text("unknown state")
        page.goto(server.url + "/")
        assert urlsplit(page.url).path == "/login/"
        assert log_problems(server.log_since(mark)) == []

    def test_expired_id_token_is_refused(
        self, sso: tuple[LiveServer, OidcProvider], context: Any
    ) -> None:
        server, provider = sso
        mark = server.log_mark()
        page = context.new_page()
        _sign_in(page, server, provider, "late")
        expect(page.locator("#sso-refused")).to_contain_text("ID token has expired")
        page.goto(server.url + "/")
        assert urlsplit(page.url).path == "/login/"
        assert log_problems(server.log_since(mark)) == []

    def test_passwords_are_off(self, sso: tuple[LiveServer, OidcProvider], context: Any) -> None:
        server, _ = sso
        page = context.new_page()
        page.goto(server.url + "/login/")
        expect(page.locator("input[name=password]")).to_have_count(0)
        token = context.cookies(server.url)
        csrf = next((c["value"] for c in token if c["name"] == "csrftoken"), "")
        response = page.request.post(
            server.url + "/login/",
            form={"username": server.username, "password": server.password},
            headers={"X-CSRFToken": csrf, "Referer": server.url + "/login/"},
        )
        assert response.status == 403
        assert "passwords are turned off" in response.text()


class SsoRenewalTests:
    def test_removed_from_the_group_loses_access_and_its_feed(
        self, sso: tuple[LiveServer, OidcProvider], context: Any, names: str
    ) -> None:
        server, provider = sso
        mark = server.log_mark()
        tab = context.new_page()
        _sign_in(tab, server, provider, "olivia")
        tab.wait_for_url(server.url + "/")
        watcher = context.new_page()
        watcher.goto(f"{server.url}/streams/{names}orders/")
        indicator = watcher.locator("#live-indicator")
        expect(indicator).to_have_attribute("data-state", "live")
        provider.set_groups("olivia", ["marketing"])
        try:
            # Past the renewal time the next page goes back to the provider, silently
            # (its session holds); the roles are read again, and none is left. The renewal
            # time is mozilla-django-oidc's, read from time.time() in the server process.
            time.sleep(3.2)  # the 3 s renewal time passes
            tab.goto(_group_url(server, names))
            expect(tab.locator("#sso-refused")).to_contain_text("no group that has a role")
            expect(indicator).to_have_attribute("data-state", "offline", timeout=5_000)
            tab.goto(server.url + "/")
            assert urlsplit(tab.url).path == "/login/"
        finally:
            provider.set_groups("olivia", ["ackboard-operators"])
        assert log_problems(server.log_since(mark)) == []

    def test_renewal_keeps_a_member_signed_in(
        self, sso: tuple[LiveServer, OidcProvider], context: Any, names: str
    ) -> None:
        server, provider = sso
        page = context.new_page()
        _sign_in(page, server, provider, "victor")
        page.wait_for_url(server.url + "/")
        time.sleep(3.2)  # the 3 s renewal time passes (the server process's time.time())
        page.goto(_group_url(server, names))
        page.wait_for_url(_group_url(server, names))
        expect(page.get_by_role("button", name="Log out")).to_be_visible()
