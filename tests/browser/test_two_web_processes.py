"""Two web processes share live updates (several web processes behind one load balancer).

The session's web server (the production server) is web process A; this module starts
a second, B, on another port with the same server, production settings, Redis, SQLite
database and secret key (so one login serves both, as behind a load balancer). A
browser watches a group page served by B; an operator acts on A. B's broadcaster must
push the change to the browser without a reload: the two processes share nothing but
Redis (its stream state, and the events the actions publish).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core.keys import stream_keys
from tests.browser.peers import peer_of
from tests.browser.server import LiveServer, log_problems, row_button, socket_connects
from tests.factories import make_pending

pytestmark = [pytest.mark.browser, pytest.mark.production]


class TwoWebProcessesTests:
    def test_an_action_on_process_a_shows_live_in_a_browser_on_process_b(
        self,
        chromium: Any,
        web_server: LiveServer,
        login_state: Any,
        browser_redis: redis.Redis,
        names: str,
    ) -> None:
        stream = f"{names}peers-{uuid.uuid4().hex[:6]}"
        [entry_id, other] = make_pending(browser_redis, stream, "g", "w1", 2)
        path = f"/streams/{stream}/groups/g/"
        with peer_of(web_server) as peer:
            assert peer.port != web_server.port and peer.proc is not None
            mark_a, mark_b = web_server.log_mark(), peer.log_mark()
            # One login for both: the session cookie is per host, not per port.
            context = chromium.new_context(storage_state=login_state)
            context.set_default_timeout(15_000)
            try:
                watcher = context.new_page()
                watcher.goto(peer.url + path)
                expect(watcher.locator("#live-indicator")).to_have_attribute("data-state", "live")
                expect(watcher.locator(f"#pending-{entry_id}")).to_be_visible()
                watcher.evaluate("() => { window.__samePage = true; }")

                actor = context.new_page()
                actor.goto(web_server.url + path)
                row = actor.locator(f"#pending-{entry_id}")
                row_button(row, "Dead-letter").click()
                dialog = actor.locator("dialog[open]")  # one shared dialog per action
                dialog.locator("input[name=reason]").fill("done by hand, on web process A")
                dialog.get_by_role("button", name="Dead-letter").click()
                expect(actor.locator(f"#pending-{entry_id}")).to_have_count(0)

                # On B: the row goes, pushed over B's socket; the page was not reloaded.
                expect(watcher.locator(f"#pending-{entry_id}")).to_have_count(0)
                expect(watcher.locator(f"#pending-{other}")).to_be_visible()
                assert watcher.evaluate("() => window.__samePage === true")
                expect(watcher.locator("#live-indicator")).to_have_attribute("data-state", "live")
            finally:
                context.close()

            assert browser_redis.xpending(stream, "g")["pending"] == 1
            assert browser_redis.xlen(stream_keys(stream).dlq) == 1
            log_a, log_b = web_server.log_since(mark_a), peer.log_since(mark_b)
            # Each process served its own page: the action went to A, the socket to B.
            assert f"POST {path}entries/{entry_id}/dead-letter/" in log_a
            assert socket_connects(log_b, f"/ws{path}") == 1
            assert socket_connects(log_a, f"/ws{path}") == 1  # the actor's own page
            assert "dead-letter" not in log_b
            assert log_problems(log_a) == [] and log_problems(log_b) == []
