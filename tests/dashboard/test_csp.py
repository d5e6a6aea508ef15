"""Content-Security-Policy: every page sends one that forbids inline script, and no page
or template needs inline script, inline event handlers, inline styles or htmx's eval.

The policy is only worth something if the pages keep working under it, so besides the
header this renders every route (with the data that makes each button and dialog appear)
and reads the markup for what the policy would block. The browser test
(tests/browser/test_csp_browser.py) checks the same pages in Chromium on the real server.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dashboard.models import AuditEvent, IndexedFailure
from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.factories import make_pending
from tests.redis_server import free_port

pytestmark = pytest.mark.django_db

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
HTMX = {"HX-Request": "true"}


def policy(response: HttpResponse) -> dict[str, list[str]]:
    """The Content-Security-Policy header as directive -> sources."""
    header = response.get("Content-Security-Policy")
    assert header, f"no Content-Security-Policy on {response.status_code} {response!r}"
    directives: dict[str, list[str]] = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            directives[words[0].lower()] = words[1:]
    return directives


class _InlineFinder(HTMLParser):
    """Markup a script-src 'self' / style-src 'self' policy blocks, or htmx's eval needs."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.htmx_config: dict[str, Any] | None = None
        self._script_has_src: bool | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        where = f"<{tag} {' '.join(k for k, _ in attrs)}>"
        for name, value in attrs:
            value = (value or "").strip()
            if name.startswith("on"):
                self.problems.append(f"inline handler {name} in {where}")
            elif name.startswith(("hx-on", "data-hx-on")):
                self.problems.append(f"htmx inline handler {name} (eval) in {where}")
            elif name == "style":
                self.problems.append(f"inline style in {where}")
            elif name in ("hx-vars", "data-hx-vars"):
                self.problems.append(f"{name} is always evaluated, in {where}")
            elif name in ("hx-vals", "hx-headers", "data-hx-vals", "data-hx-headers") and (
                value.startswith(("js:", "javascript:"))
            ):
                self.problems.append(f"{name}=js:… (eval) in {where}")
            elif name in ("hx-trigger", "data-hx-trigger") and "[" in value:
                self.problems.append(f"event filter in {name}={value!r} (eval) in {where}")
            elif name in ("href", "action", "formaction", "src") and value.lower().startswith(
                "javascript:"
            ):
                self.problems.append(f"javascript: URL in {where}")
        if tag == "script":
            self._script_has_src = bool(found.get("src"))
            if not self._script_has_src:
                self.problems.append("inline <script> without src")
        elif tag == "style":
            self.problems.append("inline <style> element")
        elif tag == "meta" and found.get("name") == "htmx-config":
            self.htmx_config = json.loads(found.get("content") or "{}")

    def handle_data(self, data: str) -> None:
        if self._script_has_src and data.strip():
            self.problems.append("<script src> with inline content")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script_has_src = None


def inline_problems(html: str) -> list[str]:
    finder = _InlineFinder()
    finder.feed(html)
    finder.close()
    return finder.problems


def assert_strict(response: HttpResponse, what: str) -> None:
    """The response carries the strict policy, and its HTML needs nothing it forbids."""
    csp = policy(response)
    assert csp.get("script-src") == ["'self'"], (what, csp.get("script-src"))
    assert csp.get("style-src") == ["'self'"], (what, csp.get("style-src"))
    assert csp.get("default-src") == ["'self'"], what
    for directive, sources in csp.items():
        for unsafe in ("'unsafe-inline'", "'unsafe-eval'", "'unsafe-hashes'", "*"):
            assert unsafe not in sources, (what, directive, sources)
    assert csp.get("object-src") == ["'none'"], what
    assert csp.get("base-uri") == ["'none'"], what
    assert csp.get("frame-ancestors") == ["'none'"], what
    assert csp.get("form-action") == ["'self'"], what
    assert csp.get("connect-src") == ["'self'"], what
    html = response.content.decode()
    assert inline_problems(html) == [], what
    finder = _InlineFinder()
    finder.feed(html)
    # Full pages: htmx itself must not need eval, inject styles or run swapped-in scripts.
    if finder.htmx_config is not None:
        assert finder.htmx_config.get("allowEval") is False, what
        assert finder.htmx_config.get("includeIndicatorStyles") is False, what
        assert finder.htmx_config.get("allowScriptTags") is False, what


@pytest.fixture
def seeded(settings: Any, redis_url: str, prefix: str, r: redis.Redis) -> dict[str, Any]:
    """A stream with pending entries, dead letters, failures and audit rows, so every
    page shows its buttons, dialogs and tables."""
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    stream = prefix + "orders"
    ids = make_pending(r, stream, "g", "w1", 4)
    for entry_id in ids[2:]:
        entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="poison")
    for attempt, entry_id in enumerate(ids[:2], start=1):
        IndexedFailure.objects.create(
            failures_key=stream_keys(stream).failures,
            source_id=f"{attempt}-0",
            stream=stream,
            group="g",
            entry_id=entry_id,
            consumer="w1",
            attempt=attempt,
            error_type="ValueError",
            message="boom",
            traceback="Traceback (most recent call last):\n  boom",
            duration_ms=3.5,
            failed_at=timezone.now() - timedelta(minutes=attempt),
        )
    AuditEvent.objects.create(
        username="op", action="retry", stream=stream, group="g", entry_ids=[ids[0]], result="ok"
    )
    dlq_id = r.xrange(stream_keys(stream).dlq, count=1)[0][0].decode()
    return {"stream": stream, "ids": ids, "dlq_id": dlq_id}


@pytest.fixture
def admin_client(client: Client, django_user_model: type[User]) -> Client:
    """A superuser: every action button, dialog and the bulk bar are rendered."""
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    return client


class PolicyHeaderTests:
    def test_every_page_sends_the_strict_policy_and_needs_no_inline_code(
        self, admin_client: Client, seeded: dict[str, Any]
    ) -> None:
        stream, ids = seeded["stream"], seeded["ids"]
        group_url = reverse("dashboard:group-detail", args=[stream, "g"])
        pages = {
            "overview": reverse("dashboard:overview"),
            "stream": reverse("dashboard:stream-detail", args=[stream]),
            "group": group_url,
            "group filtered": group_url + "?min_idle=1",
            "entry": reverse("dashboard:entry-detail", args=[stream, ids[0]]),
            "dlq": reverse("dashboard:dlq", args=[stream]),
            "failures": reverse("dashboard:failure-search"),
            "audit": reverse("dashboard:audit"),
        }
        for what, url in pages.items():
            response = admin_client.get(url)
            assert response.status_code == 200, (what, response.status_code)
            assert_strict(response, what)
            # The htmx partial of the same page (filters, pagers) is held to the same rule.
            partial = admin_client.get(url, headers=HTMX)
            assert partial.status_code == 200, what
            assert_strict(partial, what + " (htmx)")
        # The pages really show what the markup check is about.
        group_page = admin_client.get(group_url).content.decode()
        for marker in ('id="bulk-form"', '<dialog class="confirm"', 'class="live-hold"'):
            assert marker in group_page
        assert '<dialog class="confirm" aria-label="Purge' in (
            admin_client.get(pages["dlq"]).content.decode()
        )

    def test_action_answers_and_bulk_steps_need_no_inline_code(
        self, admin_client: Client, seeded: dict[str, Any]
    ) -> None:
        stream, ids = seeded["stream"], seeded["ids"]
        bulk = reverse("dashboard:bulk-action", args=[stream, "g", "retry"])
        data = {"snapshot_id": ids[-1], "scope": "selected", "ids": ids[:2]}
        for headers in ({}, HTMX):
            dry_run = admin_client.post(bulk, data, headers=headers)
            assert dry_run.status_code == 200
            assert "Confirm retry of 2" in dry_run.content.decode()
            assert_strict(dry_run, f"bulk dry run {headers}")
        refused = admin_client.post(
            reverse("dashboard:entry-action", args=[stream, "g", ids[0], "acknowledge"]),
            {"reason": ""},
            headers=HTMX,
        )
        assert 400 <= refused.status_code < 500
        assert_strict(refused, "refused action")

    def test_login_and_error_pages(
        self, client: Client, admin_client: Client, seeded: dict[str, Any], settings: Any
    ) -> None:
        stream = seeded["stream"]
        anonymous = Client()
        login = anonymous.get(reverse("login"))
        assert login.status_code == 200
        assert_strict(login, "login")
        failed = anonymous.post(reverse("login"), {"username": "x", "password": "wrong"})
        assert failed.status_code == 200
        assert_strict(failed, "failed login")
        not_found = admin_client.get(reverse("dashboard:stream-detail", args=[stream + "nope"]))
        assert not_found.status_code == 404
        assert_strict(not_found, "404")
        bad = admin_client.get(
            reverse("dashboard:group-detail", args=[stream, "g"]), {"min_idle": "x"}
        )
        assert bad.status_code == 400
        assert_strict(bad, "400")
        outsider = Client()
        outsider.force_login(User.objects.create_user("nobody", password="pw"))
        forbidden = outsider.get(reverse("dashboard:overview"))
        assert forbidden.status_code == 403
        assert_strict(forbidden, "403")
        # A login form posted without its CSRF cookie (an expired or blocked cookie).
        csrf = Client(enforce_csrf_checks=True).post(
            reverse("login"), {"username": "x", "password": "y"}
        )
        assert csrf.status_code == 403
        assert_strict(csrf, "403 CSRF")
        settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        settings.ACKBOARD_REDIS_TIMEOUT = 0.5
        outage = admin_client.get(reverse("dashboard:overview"))
        assert outage.status_code == 503
        assert_strict(outage, "503 Redis unavailable")


class AdminPageTests:
    def test_admin_pages_need_no_inline_code(self, admin_client: Client) -> None:
        for url in (
            "/admin/",
            "/admin/auth/user/",
            "/admin/auth/user/add/",
            "/admin/axes/accessattempt/",
        ):
            response = admin_client.get(url)
            assert response.status_code == 200, url
            assert_strict(response, url)


class TemplateSourceTests:
    """Every template, including branches the pages above do not reach."""

    # Comments go; template tags may sit inside attribute values, so they are blanked and
    # the HTML parser sees plain markup.
    _COMMENT = re.compile(r"{% comment %}.*?{% endcomment %}|{#.*?#}", re.DOTALL)
    _TAG = re.compile(r"{%.*?%}|{{.*?}}", re.DOTALL)

    def test_no_template_has_inline_script_handlers_or_styles(self) -> None:
        found: dict[str, list[str]] = {}
        paths = sorted(TEMPLATES.rglob("*.html"))
        assert len(paths) >= 15
        for path in paths:
            source = self._TAG.sub("x", self._COMMENT.sub("", path.read_text()))
            problems = inline_problems(source)
            if problems:
                found[str(path.relative_to(TEMPLATES))] = problems
        assert found == {}

    def test_the_finder_sees_each_kind_of_inline_code(self) -> None:
        html = (
            '<button onclick="x()">a</button><div hx-on::before-swap="y">b</div>'
            "<form hx-vals='js:{a: 1}'></form><p style=\"color: red\">c</p>"
            "<script>alert(1)</script><style>p {}</style>"
            '<a href="javascript:void(0)">d</a><input hx-trigger="keyup[key==\'Enter\']">'
        )
        assert len(inline_problems(html)) == 8
        assert inline_problems('<script src="/static/a.js" defer></script>') == []
