"""Permissions by stream in the system Chromium: a team's role sees and acts on its own
streams only, on the pages and on the live overview.

A user whose only group has the StreamScope ``team-a:*`` (read and Retry) logs in through
the form, sees the team-a stream on the overview and not the team-b one, gets the 404
page for the team-b stream's URL, presses Retry on a team-a entry (Redis shows it due),
and, with the overview open, a team-b stream created meanwhile is never pushed to it
while a team-a stream created after it is (the superuser's overview, open beside it,
tells when the server knows the team-b stream).
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from tests.browser.server import LiveServer, caught_up, row_button
from tests.factories import make_pending
from tests.waiting import wait_until

pytestmark = pytest.mark.browser


def _team_user(server: LiveServer, pattern: str) -> tuple[str, str]:
    """A user (name, password) whose one group reads and retries on ``pattern`` only."""
    name, password = f"team-{uuid.uuid4().hex[:6]}", secrets.token_urlsafe(12)
    server._manage(
        "shell", "-c",
        "from django.contrib.auth.models import Group, Permission, User\n"
        "from dashboard.models import StreamScope\n"
        f"g = Group.objects.create(name={name!r})\n"
        "g.permissions.set(Permission.objects.filter(content_type__app_label='dashboard', "
        "codename__in=['view_queues', 'retry_entry']))\n"
        f"StreamScope.objects.create(group=g, pattern={pattern!r})\n"
        f"User.objects.create_user({name!r}, password={password!r}).groups.add(g)\n",
    )  # fmt: skip
    return name, password


@pytest.fixture
def team_page(chromium: Any, web_server: LiveServer, names: str) -> Any:
    """A page logged in, through the form, as a ``team-a:*`` user."""
    username, password = _team_user(web_server, names + "team-a:*")
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.goto(web_server.url + "/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(web_server.url + "/")
    try:
        yield page
    finally:
        context.close()


def test_a_scoped_team_sees_and_retries_only_its_streams(
    team_page: Any, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
) -> None:
    admin_page, page, tag = page, team_page, uuid.uuid4().hex[:6]
    mine, theirs = f"{names}team-a:{tag}", f"{names}team-b:{tag}"
    [entry_id] = make_pending(browser_redis, mine, "g", "w1", 1)
    make_pending(browser_redis, theirs, "g", "w1", 1)
    shown = page.locator("#stream-table td.name a")
    expect(shown.filter(has_text=mine)).to_have_count(1)  # once the index holds both
    assert theirs not in shown.all_inner_texts()
    assert all(n.strip().startswith(names + "team-a:") for n in shown.all_inner_texts())

    # A team-b stream appears while the overview is open: once the server's index holds
    # it (the superuser's overview shows it), a team-a stream appears too; the push that
    # brings ours, rendered after theirs was known, leaves theirs out.
    caught_up(page)
    browser_redis.xadd(theirs + "-new", {"p": "1"})
    # Filtered to it: the session server holds other tests' streams, past one page.
    every = admin_page.locator("#stream-table td.name a").filter(has_text=theirs + "-new")

    def known() -> bool:
        admin_page.goto(f"{web_server.url}/?q={theirs}-new")
        return bool(every.count() == 1)

    wait_until(known, timeout=20, what="the server's index to hold the team-b stream")
    browser_redis.xadd(mine + "-new", {"p": "1"})
    expect(shown.filter(has_text=mine + "-new")).to_have_count(1)
    assert page.locator("body", has_text=theirs).count() == 0

    response = page.goto(f"{web_server.url}/streams/{theirs}/")
    assert response is not None and response.status == 404
    expect(page.locator("h1")).to_contain_text("Not found")
    assert theirs not in page.content()

    page.goto(f"{web_server.url}/streams/{mine}/groups/g/")
    row_button(page.locator(f"#pending-{entry_id}"), "Retry").click()
    expect(page.locator("#messages .flash", has_text="will be redelivered")).to_be_visible()
    [pending] = browser_redis.xpending_range(mine, "g", min="-", max="+", count=1)
    assert pending["time_since_delivered"] >= 30_000  # ACKBOARD_RETRY_IDLE_MS: due now
