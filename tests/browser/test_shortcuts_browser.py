"""Keyboard shortcuts and the dark theme in the system Chromium, on the real server
(dashboard/static/dashboard/shortcuts.js, ackboard.css's custom properties).

The keys are pressed as a user presses them (page.keyboard), on a group page with pending
entries: j/k move the highlight, r presses the highlighted row's own Retry (checked in
Redis: the entry made due, same owner and delivery count), c and d open the row's own
confirm dialogs, x selects the row for a bulk action, "?" shows the list and Escape
closes it; keys typed in a field stay in the field. The highlight follows its entry
through the swap an action makes. The dark theme is the system's setting emulated
(color_scheme="dark"): the computed colours change and keep their contrast.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.browser.server import LiveServer, screenshot
from tests.factories import make_pending
from tests.waiting import wait_until

pytestmark = pytest.mark.browser

CURRENT = "tr.kb-current"


def _group_url(server: LiveServer, stream: str, group: str) -> str:
    return f"{server.url}/streams/{stream}/groups/{group}/"


@pytest.fixture
def stream(names: str) -> str:
    return f"{names}keys-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def pending(
    page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
) -> list[str]:
    """Four entries pending on worker-1 in group g, the group page open and live (the
    shortcuts are wired once its scripts ran)."""
    ids = make_pending(browser_redis, stream, "g", "worker-1", 4)
    page.goto(_group_url(web_server, stream, "g"))
    expect(page.locator("tr[id^=pending-]")).to_have_count(4)
    expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")
    return ids


def _highlighted(page: Any) -> str:
    """The highlighted row's entry id ("" when none), read in one call."""
    return str(page.evaluate(
        "() => document.querySelector('tr.kb-current')?.id.replace(/^pending-/, '') ?? ''"
    ))  # fmt: skip


class MovingTests:
    def test_j_and_k_move_one_highlighted_row(self, page: Any, pending: list[str]) -> None:
        assert _highlighted(page) == ""
        page.keyboard.press("j")
        expect(page.locator(CURRENT)).to_have_attribute("id", f"pending-{pending[0]}")
        page.keyboard.press("j")
        page.keyboard.press("j")
        row = page.locator(f"#pending-{pending[2]}")
        expect(row).to_have_class(re.compile(r"\bkb-current\b"))
        expect(row).to_have_attribute("aria-selected", "true")
        expect(row).to_be_focused()
        expect(page.locator(CURRENT)).to_have_count(1)
        page.keyboard.press("k")
        expect(page.locator(CURRENT)).to_have_attribute("id", f"pending-{pending[1]}")
        # The arrows too, once a row is highlighted; the ends hold.
        for _ in range(5):
            page.keyboard.press("ArrowDown")
        expect(page.locator(CURRENT)).to_have_attribute("id", f"pending-{pending[3]}")
        page.keyboard.press("ArrowUp")
        expect(page.locator(CURRENT)).to_have_attribute("id", f"pending-{pending[2]}")
        # The highlight is drawn: a ring in the accent colour, not only a class.
        outline = page.locator(CURRENT).evaluate("e => getComputedStyle(e).outlineStyle")
        assert outline == "solid"
        page.keyboard.press("Escape")
        expect(page.locator(CURRENT)).to_have_count(0)

    def test_the_highlight_keeps_its_entry_through_a_live_push(
        self, page: Any, pending: list[str], browser_redis: redis.Redis, stream: str
    ) -> None:
        page.keyboard.press("j")
        page.keyboard.press("j")
        page.locator(f"#pending-{pending[1]}").evaluate("e => { e.dataset.before = 'push'; }")
        # A worker takes a new entry: the server pushes the whole table again.
        [added] = make_pending(browser_redis, stream, "g", "worker-2", 1, create=False)
        expect(page.locator(f"#pending-{added}")).to_have_count(1)
        row = page.locator(f"#pending-{pending[1]}")
        expect(row).not_to_have_attribute("data-before", "push")  # a new element
        expect(row).to_have_class(re.compile(r"\bkb-current\b"))
        expect(row).to_have_attribute("aria-selected", "true")
        expect(page.locator(CURRENT)).to_have_count(1)
        page.keyboard.press("j")
        expect(page.locator(CURRENT)).to_have_attribute("id", f"pending-{pending[2]}")

    def test_enter_opens_the_highlighted_entry(
        self, page: Any, pending: list[str], stream: str
    ) -> None:
        page.keyboard.press("j")
        page.keyboard.press("j")
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(re.escape(f"/streams/{stream}/entries/{pending[1]}/")))
        expect(page.locator("h1")).to_contain_text(pending[1])

    def test_x_selects_the_row_for_a_bulk_action(self, page: Any, pending: list[str]) -> None:
        page.keyboard.press("j")
        page.keyboard.press("j")
        box = page.locator(f"#pending-{pending[1]} input[name=ids]")
        page.keyboard.press("x")
        expect(box).to_be_checked()
        # A selection holds live updates (live.js), as a click on the box does.
        expect(page.locator("#live-indicator")).to_have_attribute("data-state", "paused")
        assert page.locator("input[name=ids][form=bulk-form]:checked").count() == 1
        page.keyboard.press("x")
        expect(box).not_to_be_checked()
        expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")


class ActionKeyTests:
    def test_r_retries_the_highlighted_entry_through_its_own_button(
        self, page: Any, pending: list[str], browser_redis: redis.Redis, stream: str
    ) -> None:
        target = pending[1]
        [before] = browser_redis.xpending_range(stream, "g", target, target, 1)
        assert before["time_since_delivered"] < 30_000
        page.keyboard.press("j")
        page.keyboard.press("j")
        page.keyboard.press("r")
        # Retry asks nothing on the group page: it posts, and says what it did.
        expect(page.locator("#messages .flash").last).to_contain_text("will be redelivered")

        def retried() -> Any:
            [entry] = browser_redis.xpending_range(stream, "g", target, target, 1)
            return entry if entry["time_since_delivered"] >= 30_000 else None

        after = wait_until(retried, what="the entry to be made due")
        # Due within its group, under its own id, to its own owner, deliveries unchanged.
        assert after["consumer"] == before["consumer"] == b"worker-1"
        assert after["times_delivered"] == before["times_delivered"]
        assert browser_redis.xlen(stream) == 4  # nothing re-added
        # The row came back from the server marked due, and is still the highlighted one.
        row = page.locator(f"#pending-{target}")
        expect(row.locator("td.actions-cell")).to_contain_text("already due")
        expect(row).to_have_class(re.compile(r"\bkb-current\b"))
        others = [e for e in pending if e != target]
        for entry in browser_redis.xpending_range(stream, "g", others[0], others[-1], 10):
            if entry["message_id"].decode() != target:
                assert entry["time_since_delivered"] < 30_000

    def test_d_asks_first_and_the_highlight_moves_on(
        self, page: Any, pending: list[str], browser_redis: redis.Redis, stream: str
    ) -> None:
        page.keyboard.press("j")
        page.keyboard.press("d")
        dialog = page.locator("dialog[open]")
        expect(dialog).to_have_attribute("aria-label", f"Dead-letter entry {pending[0]}")
        assert browser_redis.xpending(stream, "g")["pending"] == 4  # nothing yet
        # Keys typed in the dialog's field are text, not shortcuts.
        dialog.locator("input[name=reason]").press_sequentially("jrd")
        expect(dialog.locator("input[name=reason]")).to_have_value("jrd")
        dialog.get_by_role("button", name="Dead-letter").click()
        expect(page.locator(f"#pending-{pending[0]}")).to_have_count(0)
        [(_, fields)] = browser_redis.xrange(stream_keys(stream).dlq)
        assert fields[b"ackboard.reason"] == b"jrd"
        # The row now in its place is highlighted: triage goes on down the table.
        expect(page.locator(CURRENT)).to_have_attribute("id", f"pending-{pending[1]}")

    def test_c_opens_the_rows_claim_dialog_and_escape_cancels(
        self, page: Any, pending: list[str], browser_redis: redis.Redis, stream: str
    ) -> None:
        page.keyboard.press("k")  # from nothing, k starts at the last row
        page.keyboard.press("c")
        dialog = page.locator("dialog[open]")
        expect(dialog).to_have_attribute("aria-label", f"Claim entry {pending[3]}")
        page.keyboard.press("Escape")
        expect(page.locator("dialog[open]")).to_have_count(0)
        [entry] = browser_redis.xpending_range(stream, "g", pending[3], pending[3], 1)
        assert entry["consumer"] == b"worker-1"  # nothing claimed
        expect(page.locator(CURRENT)).to_have_attribute("id", f"pending-{pending[3]}")


class NotWhileTypingTests:
    def test_r_typed_in_the_filter_is_text(
        self, page: Any, pending: list[str], browser_redis: redis.Redis, stream: str
    ) -> None:
        page.keyboard.press("j")
        page.keyboard.press("/")
        field = page.locator("form.filters input[name=start]")
        expect(field).to_be_focused()
        page.keyboard.type("jr")
        expect(field).to_have_value("jr")
        # Nor with a modifier held: those are the browser's.
        page.locator("h1").click()
        page.keyboard.press("Alt+j")
        page.keyboard.press("Alt+r")
        # The highlight did not move and nothing was retried.
        expect(page.locator(CURRENT)).to_have_attribute("id", f"pending-{pending[0]}")
        expect(page.locator("#messages .flash")).to_have_count(0)
        for entry in browser_redis.xpending_range(stream, "g", "-", "+", 10):
            assert entry["time_since_delivered"] < 30_000


class ElsewhereTests:
    def test_dead_letters_slash_and_g_o(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        [entry] = make_pending(browser_redis, stream, "g", "worker-1", 1)
        entry_dead_letter(
            client=browser_redis, stream=stream, group="g", entry_id=entry, reason="poison"
        )
        page.goto(f"{web_server.url}/streams/{stream}/dlq/")
        expect(page.locator("tr[id^=dlq-]")).to_have_count(1)
        page.keyboard.press("j")
        expect(page.locator(CURRENT)).to_have_count(1)
        # No filter form here: "/" opens the Find panel at its first field.
        page.keyboard.press("/")
        expect(page.locator("#find-dlq input[name=field]")).to_be_focused()
        page.keyboard.press("Escape")
        page.locator("h1").click()
        page.keyboard.press("g")
        page.keyboard.press("o")
        page.wait_for_url(web_server.url + "/")
        page.keyboard.press("/")
        expect(page.locator("main input[name=q]")).to_be_focused()


class OverlayTests:
    def test_question_mark_lists_the_keys_and_escape_closes(
        self, page: Any, pending: list[str]
    ) -> None:
        opener = page.get_by_role("button", name="Keyboard shortcuts (?)")
        expect(opener).to_be_visible()
        page.keyboard.press("?")
        overlay = page.get_by_role("dialog", name="Keyboard shortcuts")
        expect(overlay).to_be_visible()
        expect(overlay.locator("th kbd").first).to_have_text("j")
        expect(overlay.get_by_role("row", name=re.compile("^r Retry"))).to_have_count(1)
        page.keyboard.press("Escape")
        expect(overlay).to_be_hidden()
        # The top bar's button opens the same list; its Close closes it.
        opener.click()
        expect(overlay).to_be_visible()
        overlay.get_by_role("button", name="Close").click()
        expect(overlay).to_be_hidden()
        assert page.locator("dialog#shortcuts-help").count() == 1  # built once

    def test_without_javascript_there_is_no_shortcuts_button(
        self, no_js_page: Any, web_server: LiveServer
    ) -> None:
        no_js_page.goto(web_server.url + "/")
        expect(no_js_page.locator("[data-shortcuts-open]")).to_be_hidden()


# --- the dark theme ---------------------------------------------------------------------

_COLOURS = """() => {
  const css = (sel, prop) => {
    const el = document.querySelector(sel);
    return el ? getComputedStyle(el)[prop] : null;
  };
  return {
    body: [css("body", "color"), css("body", "backgroundColor")],
    button: [css("#pending-table details.row-menu > summary.btn", "color"),
             css("#pending-table details.row-menu > summary.btn", "backgroundColor")],
    danger: [css("#bulk-form button.danger", "color"),
             css("#bulk-form button.danger", "backgroundColor")],
    card: [css(".fact .value", "color"), css(".fact", "backgroundColor")],
    muted: [css(".fact .label", "color"), css(".fact", "backgroundColor")],
    link: [css(".breadcrumbs a", "color"), css("body", "backgroundColor")],
    badge: [css("#group-health .badge", "color"), css("#group-health .badge", "backgroundColor")],
  };
}"""


def _rgb(css: str) -> tuple[float, float, float]:
    r, g, b = (float(v) for v in re.findall(r"[\d.]+", css)[:3])
    return r, g, b


def _contrast(fg: str, bg: str) -> float:
    """WCAG 2 contrast ratio of two computed ``rgb(...)`` colours."""

    def luminance(colour: str) -> float:
        def channel(c: float) -> float:
            c /= 255
            return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

        r, g, b = (channel(c) for c in _rgb(colour))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.fixture
def themed(chromium: Any, login_state: Any) -> Iterator[Any]:
    """A logged-in page factory: ``themed("dark")`` or ``themed("light")``."""
    contexts: list[Any] = []

    def make(scheme: str) -> Any:
        context = chromium.new_context(
            viewport={"width": 1280, "height": 860}, storage_state=login_state,
            color_scheme=scheme,
        )  # fmt: skip
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


class DarkThemeTests:
    def test_dark_follows_the_system_and_stays_readable(
        self, themed: Any, web_server: LiveServer, browser_redis: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(browser_redis, stream, "g", "worker-1", 3)
        url = _group_url(web_server, stream, "g")
        seen = {}
        for scheme in ("light", "dark"):
            page = themed(scheme)
            page.goto(url)
            expect(page.locator("tr[id^=pending-]")).to_have_count(3)
            seen[scheme] = page.evaluate(_COLOURS)
            # A payload block, on the entry's page.
            page.goto(f"{web_server.url}/streams/{stream}/entries/{ids[0]}/")
            block = page.locator("pre.value").first
            expect(block).to_be_visible()
            seen[scheme]["payload"] = block.evaluate(
                "e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]"
            )
        light, dark = seen["light"], seen["dark"]
        assert dark["body"] != light["body"] and dark["button"] != light["button"]
        # Dark is dark: the page's background is darker than its text.
        assert sum(_rgb(dark["body"][1])) < sum(_rgb(dark["body"][0]))
        for scheme, colours in seen.items():
            for what, (fg, bg) in colours.items():
                assert fg and bg, (scheme, what)
                ratio = _contrast(fg, bg)
                assert ratio >= 4.5, (scheme, what, fg, bg, round(ratio, 2))

    def test_screenshots_of_the_overlay_and_the_dark_group_page(
        self, themed: Any, web_server: LiveServer, seeded: dict[str, str]
    ) -> None:
        """docs/pages.md's pictures, on the shop's billing group (read only)."""
        url = _group_url(web_server, seeded["orders"], "billing")
        for scheme in ("light", "dark"):
            page = themed(scheme)
            page.goto(url)
            expect(page.locator("tr[id^=pending-]").first).to_be_visible()
            expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")
            page.keyboard.press("j")
            page.keyboard.press("j")
            expect(page.locator(CURRENT)).to_have_count(1)
            if scheme == "dark":
                screenshot(page, "group-dark")
            page.keyboard.press("?")
            expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
            screenshot(page, "shortcuts-overlay" if scheme == "light" else "shortcuts-overlay-dark")
