"""Production tier: a stream of hostile payloads beside a normal one, on the real daphne
server with channels-redis, in Chromium.

One stream carries what hostile or careless producers send: JSON nested thousands of
levels deep, HTML and script in values and field names, binary bytes, and secrets behind
a BOM or a Latin-1 byte. Every page of that stream must answer 200 with its action
buttons, run no script from a payload, and never show a secret; and the live feed of the
normal stream beside it must keep flowing while the hostile surfaces are open too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.browser.server import LiveServer, log_problems

pytestmark = [pytest.mark.browser, pytest.mark.production]

MARK = "HOSTILE" + uuid.uuid4().hex[:8].upper()
#: Each would set ``window.__pwned`` if the page ran it.
SCRIPTED = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
HOSTILE: dict[str, dict[bytes, bytes]] = {
    "deep": {b"payload": b"[" * 5000 + b"]" * 5000},
    "html": {
        b"note": SCRIPTED.encode(),
        b'<img src=x onerror="window.__pwned=3">': b"name",
        b"payload": b'{"<img src=x onerror=window.__pwned=4>": '
        b'"<script>window.__pwned=5</script>"}',
    },
    "binary": {b"blob": b"\xff\xfe\x00\x1b[31m\x80binary"},
    "bom_secret": {
        b"payload": b'\xef\xbb\xbf{"user": "ann", "password": "' + MARK.encode() + b'"}'
    },
    "latin1_secret": {b"payload": b'{"name": "Jos\xe9", "api_token": "' + MARK.encode() + b'"}'},
}
#: These are dead-lettered too, so the dead-letter page shows hostile rows.
DEAD_LETTERED = ("deep", "bom_secret", "html")


@pytest.fixture
def streams(browser_redis: redis.Redis, names: str) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(hostile stream, calm stream, {shape: entry id}); their keys are deleted after."""
    token = uuid.uuid4().hex[:6]
    hostile, calm = f"{names}hostile-{token}", f"{names}calm-{token}"
    browser_redis.xgroup_create(hostile, "g", id="0", mkstream=True)
    ids = {shape: browser_redis.xadd(hostile, fields).decode() for shape, fields in HOSTILE.items()}
    browser_redis.xreadgroup("g", "w1", {hostile: ">"})
    for shape in DEAD_LETTERED:
        entry_dead_letter(
            client=browser_redis, stream=hostile, group="g", entry_id=ids[shape], reason="poison"
        )
    browser_redis.xadd(calm, {"payload": '{"n": 1}'})
    try:
        yield hostile, calm, ids
    finally:
        for name in (hostile, calm):
            keys = stream_keys(name)
            browser_redis.delete(name, keys.dlq, keys.failures)


def _open(page: Any, url: str) -> str:
    """Go to ``url``; check it answered 200, ran no payload script, shows no secret."""
    response = page.goto(url)
    assert response is not None and response.status == 200, url
    body: str = response.text()
    assert MARK not in body, url
    assert page.evaluate("typeof window.__pwned") == "undefined", url
    assert MARK not in page.content(), url
    return body


class HostilePayloadTests:
    def test_hostile_stream_costs_only_its_rows_and_live_updates_go_on(
        self,
        chromium: Any,
        login_state: Any,
        web_server: LiveServer,
        browser_redis: redis.Redis,
        streams: tuple[str, str, dict[str, str]],
    ) -> None:
        hostile, calm, ids = streams
        base = f"{web_server.url}/streams"
        mark = web_server.log_mark()
        context = chromium.new_context(storage_state=login_state)
        context.set_default_timeout(10_000)
        try:
            page = context.new_page()
            # The overview lists streams from its index, refreshed every second here: the
            # two new streams show up within a refresh (filtered by their common token).
            token = hostile.rpartition("-")[2]
            for _ in range(20):
                overview = _open(page, f"{web_server.url}/?q={token}")
                if f"/streams/{hostile}/" in overview and f"/streams/{calm}/" in overview:
                    break
                page.wait_for_timeout(250)
            assert f"/streams/{hostile}/" in overview and f"/streams/{calm}/" in overview
            _open(page, f"{base}/{hostile}/")
            for entry_id in ids.values():
                _open(page, f"{base}/{hostile}/entries/{entry_id}/")
            expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")

            _open(page, f"{base}/{hostile}/dlq/")
            rows = page.locator("#dlq-table tbody tr")
            expect(rows).to_have_count(len(DEAD_LETTERED))
            for button in ("Replay", "Delete"):
                # In each row's actions menu (closed, so counted hidden ones included).
                expect(
                    rows.get_by_role("button", name=button, exact=True, include_hidden=True)
                ).to_have_count(len(DEAD_LETTERED))
            expect(page.get_by_role("button", name="Purge", exact=True).first).to_be_visible()
            page.locator("#dlq-table details.payload summary").first.click()  # show a payload
            assert page.evaluate("typeof window.__pwned") == "undefined"

            # Hostile surfaces stay open (live) in two tabs while the calm stream changes.
            group_tab = context.new_page()
            _open(group_tab, f"{base}/{hostile}/groups/g/")
            expect(group_tab.locator("#live-indicator")).to_have_attribute("data-state", "live")
            entry_tab = context.new_page()
            _open(entry_tab, f"{base}/{hostile}/entries/{ids['deep']}/")
            calm_tab = context.new_page()
            _open(calm_tab, f"{base}/{calm}/")
            expect(calm_tab.locator("#live-indicator")).to_have_attribute("data-state", "live")

            # A new hostile entry re-renders the hostile surfaces in the same cycles.
            browser_redis.xadd(hostile, HOSTILE["deep"])
            browser_redis.xreadgroup("g", "w1", {hostile: ">"})
            new_id = browser_redis.xadd(calm, {"payload": '{"n": 2}'}).decode()
            link = calm_tab.locator("#entry-table").get_by_role("link", name=new_id, exact=True)
            expect(link).to_be_visible()
            latest = browser_redis.xadd(hostile, HOSTILE["bom_secret"]).decode()
            browser_redis.xreadgroup("g", "w1", {hostile: ">"})
            pending = group_tab.locator(f"#pending-{latest}")
            expect(pending).to_be_visible()  # pushed live: the hostile group's feed works too
            for tab in (page, group_tab, entry_tab, calm_tab):
                assert tab.evaluate("typeof window.__pwned") == "undefined"
                assert MARK not in tab.content()
            assert log_problems(web_server.log_since(mark)) == []
        finally:
            context.close()
