"""The Content-Security-Policy in the system Chromium on the real daphne server: no page
breaks it, and every control whose inline handler moved to ackboard.js still works.

Violations are collected three ways: ``securitypolicyviolation`` events (an init script
in every document reports them to Python), console messages naming the policy, and
uncaught page errors. htmx with ``allowEval`` off reports what it refused to eval as an
``htmx:evalDisallowedError`` console error, which is collected too. The login throttle's
429 page is checked here as well, on production settings.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core.services import entry_dead_letter
from tests.browser.server import LiveServer, row_button
from tests.factories import make_pending

pytestmark = pytest.mark.browser

_REPORTER = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolation(`${e.violatedDirective} blocked ${e.blockedURI || "inline"}`
    + ` at ${e.sourceFile || location.pathname}:${e.lineNumber}`);
}, true);
"""


class Violations(list[str]):
    """Everything the policy blocked, or that broke because of it, in one context."""

    def watch(self, page: Any) -> Any:
        page.context.expose_function("__cspViolation", lambda text: self.append(text))
        page.context.add_init_script(_REPORTER)

        def on_console(message: Any) -> None:
            text = message.text
            if "Content Security Policy" in text or "evalDisallowed" in text:
                self.append(f"console: {text}")

        page.on("console", on_console)
        page.on("pageerror", lambda error: self.append(f"page error: {error}"))
        return page


@pytest.fixture
def violations() -> Violations:
    return Violations()


@pytest.fixture
def csp_page(page: Any, violations: Violations) -> Any:
    """The logged-in ``page``, reporting violations from its next navigation on."""
    return violations.watch(page)


@pytest.fixture
def anonymous_csp_page(anonymous_page: Any, violations: Violations) -> Iterator[Any]:
    yield violations.watch(anonymous_page)


def _stream(names: str) -> str:
    return f"{names}csp-{uuid.uuid4().hex[:6]}"


def _goto(page: Any, url: str) -> None:
    response = page.goto(url)
    assert response is not None and response.ok, url
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy
    # htmx was told not to inject its indicator <style> (style-src 'self' would block it).
    expect(page.locator("head style")).to_have_count(0)


def _settle(page: Any) -> None:
    """Let reports still on their way from the page arrive."""
    page.wait_for_timeout(300)


def _live(page: Any) -> None:
    """The socket opened under connect-src 'self'."""
    expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")


class PolicyTests:
    def test_the_collector_sees_a_blocked_inline_handler(
        self, csp_page: Any, web_server: LiveServer, violations: Violations
    ) -> None:
        _goto(csp_page, web_server.url + "/")
        csp_page.evaluate(
            """() => document.body.insertAdjacentHTML(
                "beforeend", '<button id="probe" onclick="window.__ran = 1">probe</button>')"""
        )
        csp_page.locator("#probe").click()
        _settle(csp_page)
        assert csp_page.evaluate("window.__ran") is None
        assert any("script-src" in v for v in violations), violations

    def test_every_page_loads_and_goes_live_without_a_violation(
        self,
        csp_page: Any,
        web_server: LiveServer,
        browser_redis: redis.Redis,
        names: str,
        violations: Violations,
    ) -> None:
        stream = _stream(names)
        ids = make_pending(browser_redis, stream, "g", "w1", 3)
        entry_dead_letter(
            client=browser_redis, stream=stream, group="g", entry_id=ids[2], reason="x"
        )
        base = web_server.url
        for path, live in (
            ("/", True),
            (f"/streams/{stream}/", True),
            (f"/streams/{stream}/groups/g/", True),
            (f"/streams/{stream}/entries/{ids[0]}/", True),
            (f"/streams/{stream}/dlq/", False),
            ("/failures/", False),
            ("/audit/", False),
            (f"/streams/{stream}nope/", False),
        ):
            if path.endswith("nope/"):
                response = csp_page.goto(base + path)
                assert response is not None and response.status == 404
            else:
                _goto(csp_page, base + path)
            if live:
                _live(csp_page)
        # The filter forms swap tables over htmx.
        csp_page.goto(base + "/failures/")
        csp_page.get_by_label("Error type").fill("TimeoutError")
        csp_page.get_by_label("Error type").press("Enter")
        expect(csp_page).to_have_url(re.compile("error_type=TimeoutError"))
        _settle(csp_page)
        assert violations == []


class MovedHandlerTests:
    def test_dialogs_hold_live_updates_and_close(
        self,
        csp_page: Any,
        web_server: LiveServer,
        browser_redis: redis.Redis,
        names: str,
        violations: Violations,
    ) -> None:
        stream = _stream(names)
        [first, second] = make_pending(browser_redis, stream, "g", "w1", 2)
        _goto(csp_page, f"{web_server.url}/streams/{stream}/groups/g/")
        _live(csp_page)
        indicator = csp_page.locator("#live-indicator")
        row = csp_page.locator(f"#pending-{first}")

        row_button(row, "Claim").click()
        dialog = csp_page.locator("dialog[open]")
        expect(dialog).to_be_visible()
        expect(dialog.locator(".live-hold")).to_be_checked()
        expect(indicator).to_have_attribute("data-state", "paused")
        dialog.get_by_role("button", name="Cancel").click()
        expect(csp_page.locator("dialog[open]")).to_have_count(0)
        expect(indicator).to_have_attribute("data-state", "live")

        row_button(row, "Dead-letter").click()
        expect(csp_page.locator("dialog[open]")).to_be_visible()
        expect(indicator).to_have_attribute("data-state", "paused")
        csp_page.keyboard.press("Escape")
        expect(csp_page.locator("dialog[open]")).to_have_count(0)
        expect(indicator).to_have_attribute("data-state", "live")

        # A refused claim (a worker took the entry meanwhile): the 409 is shown, through
        # data-swap-4xx, and the dialog closes after its request.
        row_button(row, "Claim").click()
        browser_redis.xclaim(stream, "g", "w2", 0, [first])
        csp_page.locator("dialog[open]").get_by_role("button", name="Claim", exact=True).click()
        expect(csp_page.locator("#messages")).to_contain_text("changed since you looked")
        expect(csp_page.locator("dialog[open]")).to_have_count(0)
        expect(indicator).to_have_attribute("data-state", "live")

        # A successful acknowledge removes the row; live updates resume.
        other = csp_page.locator(f"#pending-{second}")
        row_button(other, "Acknowledge").click()
        csp_page.locator("dialog[open]").get_by_label("Reason (required)").fill("duplicate")
        csp_page.locator("dialog[open]").get_by_role("button", name="Acknowledge").click()
        expect(csp_page.locator(f"#pending-{second}")).to_have_count(0)
        expect(indicator).to_have_attribute("data-state", "live")
        assert browser_redis.xpending(stream, "g")["pending"] == 1

        # Copy buttons.
        csp_page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        copy = csp_page.locator("h1 button.copy")
        copy.click()
        expect(copy).to_have_text("copied")
        assert csp_page.evaluate("navigator.clipboard.readText()") == "g"
        expect(copy).to_have_text("copy name")
        _settle(csp_page)
        assert violations == []

    def test_bulk_bar_posts_the_current_filter_and_cancel_clears_the_result(
        self,
        csp_page: Any,
        web_server: LiveServer,
        browser_redis: redis.Redis,
        names: str,
        violations: Violations,
    ) -> None:
        stream = _stream(names)
        make_pending(browser_redis, stream, "g", "w1", 2)
        [mine] = make_pending(browser_redis, stream, "g", "w2", 1)
        _goto(csp_page, f"{web_server.url}/streams/{stream}/groups/g/")
        _live(csp_page)
        bulk, result = csp_page.locator("#bulk-form"), csp_page.locator("#bulk-result")

        # The consumer filter changes after the page loaded; the bulk bar must post it.
        csp_page.locator("form.filters[method=get] select[name=consumer]").select_option("w2")
        expect(csp_page.locator(f"#pending-{mine}")).to_be_visible()
        expect(csp_page.locator("#pending-table tbody tr")).to_have_count(1)
        bulk.locator("select[name=scope]").select_option("filter")
        bulk.get_by_role("button", name="Retry…").click()
        expect(result).to_contain_text("1 entry matching this filter")
        result.get_by_role("button", name="Cancel").click()
        expect(result).to_be_empty()

        # Ticked rows pause the live badge and scope the dry run.
        csp_page.locator(f"#pending-{mine} input[form=bulk-form]").check()
        expect(csp_page.locator("#live-indicator")).to_have_attribute("data-state", "paused")
        bulk.locator("select[name=scope]").select_option("selected")
        bulk.get_by_role("button", name="Acknowledge…").click()
        # Acknowledge needs a reason: the 400 refusal is shown (data-swap-4xx on the form).
        expect(csp_page.locator("#messages")).to_contain_text("needs a reason")
        bulk.get_by_label("Reason").fill("duplicates")
        bulk.get_by_role("button", name="Acknowledge…").click()
        expect(result).to_contain_text("1 entry of the 1 selected")
        result.get_by_role("button", name="Confirm acknowledge of 1").click()
        expect(result).to_contain_text("1 done")
        expect(csp_page.locator(f"#pending-{mine}")).to_have_count(0)
        assert browser_redis.xpending(stream, "g")["pending"] == 2
        _settle(csp_page)
        assert violations == []

    def test_dead_letter_purge_dialog_and_replay_confirm(
        self,
        csp_page: Any,
        web_server: LiveServer,
        browser_redis: redis.Redis,
        names: str,
        violations: Violations,
    ) -> None:
        stream = _stream(names)
        ids = make_pending(browser_redis, stream, "g", "w1", 2)
        for entry_id in ids:
            entry_dead_letter(
                client=browser_redis, stream=stream, group="g", entry_id=entry_id, reason="x"
            )
        _goto(csp_page, f"{web_server.url}/streams/{stream}/dlq/")
        csp_page.get_by_role("button", name="Purge", exact=True).click()
        dialog = csp_page.locator("dialog[open]")
        expect(dialog).to_be_visible()
        dialog.get_by_role("button", name="Cancel").click()
        expect(csp_page.locator("dialog[open]")).to_have_count(0)
        # A refused purge (wrong name) answers 400: shown, and the dialog closes.
        csp_page.get_by_role("button", name="Purge", exact=True).click()
        csp_page.locator("dialog[open]").get_by_label("Type the stream name to confirm").fill("no")
        csp_page.locator("dialog[open]").get_by_role("button", name="Purge", exact=True).click()
        expect(csp_page.locator("#messages")).to_contain_text("Type the stream's name")
        expect(csp_page.locator("dialog[open]")).to_have_count(0)
        # Replay asks through hx-confirm (window.confirm, no eval).
        csp_page.once("dialog", lambda confirm: confirm.accept())
        row_button(csp_page.locator("#dlq-table tbody tr").first, "Replay").click()
        expect(csp_page.locator("#messages")).to_contain_text("replayed to group g")
        assert browser_redis.xlen(stream) == 3
        _settle(csp_page)
        assert violations == []


class LoginThrottleTests:
    def test_lockout_page_on_the_real_server_and_other_users_unaffected(
        self, anonymous_csp_page: Any, web_server: LiveServer, violations: Violations
    ) -> None:
        page = anonymous_csp_page
        intruder = f"intruder-{uuid.uuid4().hex[:6]}"
        _goto(page, web_server.url + "/login/")
        statuses = []
        for _ in range(5):
            page.fill("input[name=username]", intruder)
            page.fill("input[name=password]", "guess")
            with page.expect_response(lambda r: r.request.method == "POST") as answer:
                page.click("button[type=submit]")
            statuses.append(answer.value.status)
            if answer.value.status == 429:
                break
            page.goto(web_server.url + "/login/")
        assert statuses == [200, 200, 200, 200, 429]
        expect(page.locator("#locked-out h1")).to_have_text("Too many failed logins (429)")
        expect(page.locator("#locked-out")).to_contain_text(f"for {intruder} from this address")
        # The operator, from the same address, still logs in.
        page.goto(web_server.url + "/login/")
        page.fill("input[name=username]", web_server.username)
        page.fill("input[name=password]", web_server.password)
        page.click("button[type=submit]")
        page.wait_for_url(web_server.url + "/")
        expect(page.locator("header")).to_contain_text(web_server.username)
        _settle(page)
        assert violations == []
