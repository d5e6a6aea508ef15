"""The press-every-button tier: every action button and dialog of the demo-shaped pages,
pressed in the system Chromium with JavaScript on, at 1440 x 900.

``BUTTONS`` is the table: one row per button (a new button is one row). Each row names the
page it is pressed on, its steps (a dry run, then its confirmation, is two), and for each
step the URL its request must reach. A test loads the page once, presses each step and
checks, from the browser's own view of the request, that it went to that action's URL and
was answered with 2xx/3xx (a button that posts to the wrong URL, or sends nothing, fails
here); then that Redis changed as the action says, that the server's newest audit row
names the action and its ids, and that the result is shown where the user is looking (in
the viewport: the toast of ``#messages``, or the card a dry run fills in place).

Every test seeds its own stream in the demo's shape (``_shop``): a group with more than a
page of pending entries on two consumers, some with recorded failures, dead letters, a
worker heartbeat, a consumer to retire and an idle one, a caught-up group, a group with no
consumers for the administration forms, and a few entries every group is done with (what
Trim may delete). Buttons in a table row are pressed through ``press_row_action``, which
opens the row's ``details.row-menu`` first when the row has one.

The toast itself (``ToastTests``): after acting on a row far down a 50-row page the
message is in view, announced (role=status, or role=alert for a refusal), covers no row
button and can be dismissed; without JavaScript it is on the redirected page, at its top.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from queue_core.control import Heartbeat, heartbeat_send, pause_set
from queue_core.keys import stream_keys
from queue_core.services import LATER_CONSUMER, entry_dead_letter
from tests.browser.server import LiveServer, caught_up, screenshot, worker_failure
from tests.waiting import wait_until

pytestmark = pytest.mark.browser

#: The issue's screen.
VIEWPORT = {"width": 1440, "height": 900}
#: How long a press (its clicks, its dialog) may take to send its request: generous, as
#: the full suite's load slows Chromium; a button that sends nothing fails after it.
SENT_WITHIN_MS = 15_000


# --- the data ------------------------------------------------------------------------------


@dataclass
class Shop:
    """One test's stream in the demo's shape, and the ids the buttons act on."""

    stream: str
    #: Every entry, oldest first.
    ids: list[str]
    #: Pending in "billing" on worker-a, oldest first (the first page shows 50 of them).
    pending: list[str]
    #: Pending on worker-old (the consumer Retire retires).
    old: list[str]
    #: The dead letters' ids in the dead-letter stream, newest first (as the page lists them).
    dead: list[str]
    #: What the steps found on the page (a redrive job's id, say), for later steps.
    seen: dict[str, str] = field(default_factory=dict)

    @property
    def dlq(self) -> str:
        return stream_keys(self.stream).dlq


def _shop(r: redis.Redis, names: str) -> Shop:
    """A stream like the demo's orders, after a while (see the module's docstring)."""
    stream = f"{names}btn-{uuid.uuid4().hex[:8]}"
    fields = [
        {
            "type": "order.created",
            "payload": json.dumps({"order": n, "customer": "ada", "amount": 19.5 + n}),
        }
        for n in range(70)
    ]
    # One entry a second, ending a few seconds ago (Jump finds an entry by its second).
    first_s = int(time.time()) - 80
    pipe = r.pipeline(transaction=False)
    for n, f in enumerate(fields):
        pipe.xadd(stream, f, id=f"{(first_s + n) * 1000}-0")
    ids = [i.decode() for i in pipe.execute()]
    r.xgroup_create(stream, "billing", id="0")
    r.xgroup_create(stream, "shipping", id="0")
    r.xgroup_create(stream, "reporting", id="$")  # no consumers: administration's group
    r.xreadgroup("shipping", "shipper-1", {stream: ">"})
    r.xack(stream, "shipping", *ids)
    done = [e[0] for e in r.xreadgroup("billing", "worker-a", {stream: ">"}, count=4)[0][1]]
    r.xack(stream, "billing", *done)  # ids[:4]: every group is done with them (Trim's)
    r.xreadgroup("billing", "worker-a", {stream: ">"}, count=58)
    r.xreadgroup("billing", "worker-old", {stream: ">"}, count=2)
    r.xgroup_createconsumer(stream, "billing", "idle-1")  # holds nothing: Retire idle's
    mine = ids[4:62]
    for n, entry_id in enumerate(mine[-8:]):
        worker_failure(
            r, stream=stream, group="billing", entry_id=entry_id, consumer="worker-a",
            attempt=1, error=("TimeoutError", f"payment gateway did not answer ({n})"),
        )  # fmt: skip
    dead_ids = []
    for entry_id in mine[:4]:
        moved = entry_dead_letter(
            client=r, stream=stream, group="billing", entry_id=entry_id,
            reason="max deliveries (5) reached", last_error="TimeoutError: gateway",
        )  # fmt: skip
        assert moved is not None
        dead_ids.append(moved.dlq_id)
    now_ms = int(time.time() * 1000)
    beat = Heartbeat(
        consumer="worker-a", host="demo-host", pid=4242, version="test", concurrency=4,
        running=0, buffered=0, processed=120, failed=8, started_ms=now_ms - 60_000,
        seen_ms=now_ms, paused=False, pause_at_ms=None,
    )  # fmt: skip
    heartbeat_send(client=r, stream=stream, group="billing", beat=beat)
    return Shop(
        stream=stream, ids=ids, pending=mine[4:], old=ids[62:64], dead=dead_ids[::-1]
    )  # fmt: skip


def _paused(r: redis.Redis, shop: Shop, server: LiveServer) -> None:
    pause_set(
        client=r, stream=shop.stream, group="billing", by="someone", reason="deploy",
        until_ms=None, now_ms=int(time.time() * 1000),
    )  # fmt: skip


def _idle_for_a_second(r: redis.Redis, shop: Shop) -> None:
    """Wait until idle-1 has been idle 1 s, the least "Retire idle consumers" takes (an
    event in Redis's clock, polled)."""

    def idle_ms() -> int:
        found = {c["name"]: c for c in r.xinfo_consumers(shop.stream, "billing")}
        return int(found[b"idle-1"]["idle"])

    wait_until(lambda: idle_ms() >= 1_100, 10, "idle-1 to be idle 1 s", interval=0.1)


# --- reading what happened --------------------------------------------------------------


def newest_audit(server: LiveServer, stream: str) -> tuple[str, str, list[str]] | None:
    """(action, result, entry ids) of the server's newest audit row on ``stream``."""
    db = sqlite3.connect(f"file:{server.workdir / 'db.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        row = db.execute(
            "SELECT action, result, entry_ids FROM dashboard_auditevent"
            " WHERE stream = ? ORDER BY id DESC LIMIT 1",
            (stream,),
        ).fetchone()
    finally:
        db.close()
    return None if row is None else (row[0], row[1], json.loads(row[2]))


def _pending(r: redis.Redis, stream: str, entry_id: str) -> dict[str, Any] | None:
    found = r.xpending_range(stream, "billing", entry_id, entry_id, 1)
    return found[0] if found else None


def _groups(r: redis.Redis, stream: str) -> dict[str, dict[str, Any]]:
    return {g["name"].decode(): g for g in r.xinfo_groups(stream)}


def _consumers(r: redis.Redis, stream: str) -> set[str]:
    return {c["name"].decode() for c in r.xinfo_consumers(stream, "billing")}


# --- pressing ---------------------------------------------------------------------------


def press_row_action(row: Any, name: str) -> None:
    """Press the button ``name`` of a table row, opening the row's compact menu
    (``details.row-menu``) first if it has one."""
    menu = row.locator("details.row-menu")
    if menu.count() and not menu.first.evaluate("d => d.open"):
        menu.first.locator("summary").click()
    row.get_by_role("button", name=name, exact=True).click()


def confirm(page: Any, button: str, fill: dict[str, str] | None = None) -> None:
    """In the open dialog: fill the fields (by their labels), press its ``button``."""
    dialog = page.locator("dialog[open]")
    expect(dialog).to_have_count(1)
    for label, value in (fill or {}).items():
        dialog.get_by_label(label).fill(value)
    dialog.get_by_role("button", name=button, exact=True).click()


def accept_confirm(page: Any) -> None:
    """Accept the next browser confirm() (hx-confirm)."""
    page.once("dialog", lambda d: d.accept())


def _pending_row(page: Any, entry_id: str) -> Any:
    return page.locator(f"#pending-table tr[id='pending-{entry_id}']")


def _dlq_row(page: Any, dlq_id: str) -> Any:
    return page.locator(f"#dlq-table tr[id='dlq-{dlq_id}']")


def _entry_row(page: Any) -> Any:
    return page.locator("#entry-state tr", has_text="billing")


def toast(page: Any, text: str) -> Any:
    """The result message ``text`` in the messages region."""
    return page.locator("#messages .flash", has_text=text)


Press = Callable[[Any, Shop], None]
Where = Callable[[Shop], str]


@dataclass(frozen=True)
class Step:
    """One press, and the URL (path) its request must reach."""

    press: Press
    url: Where
    method: str = "POST"
    #: What must then be in view (a dry run's card); None: nothing before the next step.
    shows: Callable[[Any, Shop], Any] | None = None


@dataclass(frozen=True)
class Button:
    """One button of the table: where it is, how it is pressed, what it must do."""

    name: str
    page: Where
    steps: tuple[Step, ...]
    #: The result that must be in view after the last step (mostly the toast's message).
    result: Callable[[Any, Shop], Any]
    #: What Redis must show after it; raises AssertionError otherwise.
    changed: Callable[[redis.Redis, Shop], None]
    #: The audit row's action and its ids; None for a read (Find, Jump).
    audit: str | None = None
    audit_ids: Callable[[Shop], list[str]] = lambda shop: []
    #: Done before the page loads (a pause for Resume to lift), given the server.
    prepare: Callable[[redis.Redis, Shop, LiveServer], None] | None = None
    #: Done before the first press (wait for an idle time).
    before_press: Callable[[redis.Redis, Shop], None] | None = None
    #: The page has live updates (wait for its first push before pressing).
    live: bool = True


def _group(shop: Shop, group: str = "billing") -> str:
    return f"/streams/{shop.stream}/groups/{group}/"


def _row_action(shop: Shop, entry_id: str, action: str) -> str:
    return f"/streams/{shop.stream}/groups/billing/entries/{entry_id}/{action}/"


#: Rows of the first page far down it (the 45th to 49th of 50), where the issue acted.
FAR = (44, 45, 46, 47, 48)


def _far(shop: Shop, n: int) -> str:
    return shop.pending[FAR[n]]


def _select(page: Any, *entry_ids: str) -> None:
    for entry_id in entry_ids:
        _pending_row(page, entry_id).get_by_label(f"Select {entry_id}").check()


def _bulk(
    action: str, label: str, verb: str, fill_in: dict[str, str] | None = None, **fill: str
) -> Button:
    """A bulk bar button on two selected rows far down the page: its dry run, then its
    confirmation (the answer is the card under the bar, and the toast)."""

    def press(page: Any, shop: Shop) -> None:
        _select(page, _far(shop, 0), _far(shop, 1))
        bar = page.locator("#bulk-form")
        for name, value in {**fill, **(fill_in or {})}.items():
            bar.get_by_label(name).fill(value)
        bar.get_by_role("button", name=label, exact=True).click()

    def url(shop: Shop) -> str:
        return f"/streams/{shop.stream}/groups/billing/bulk/{action}/"

    def changed(r: redis.Redis, shop: Shop) -> None:
        for entry_id in (_far(shop, 0), _far(shop, 1)):
            row = _pending(r, shop.stream, entry_id)
            if action == "retry":
                assert row is not None and row["time_since_delivered"] >= 30_000
            elif action == "retry-later":
                assert row is not None and row["consumer"] == LATER_CONSUMER.encode()
                assert r.zscore(stream_keys(shop.stream).later("billing"), entry_id)
            else:
                assert row is None
        assert r.xlen(shop.dlq) == (6 if action == "dead-letter" else 4)

    return Button(
        name=f"bulk-{action}",
        page=_group,
        steps=(
            Step(press, url, shows=lambda page, shop: page.locator("#bulk-result .card")),
            Step(_confirm_card("#bulk-result", f"Confirm {action} of 2"), url),
        ),
        result=lambda page, shop: toast(page, f"{verb.capitalize()} 2 entries."),
        changed=changed,
        audit=f"bulk-{action}",
        audit_ids=lambda shop: [_far(shop, 0), _far(shop, 1)],
    )


def _entry_button(action: str, label: str, message: str, dialog: dict[str, str] | None) -> Button:
    """One of the entry page's buttons, in the row of its group billing (the page reloads
    with the message)."""

    def changed(r: redis.Redis, shop: Shop) -> None:
        row = _pending(r, shop.stream, shop.pending[0])
        if action == "retry":
            assert row is not None and row["time_since_delivered"] >= 30_000
        elif action == "retry-later":
            assert row is not None and row["consumer"] == LATER_CONSUMER.encode()
            assert r.zscore(stream_keys(shop.stream).later("billing"), shop.pending[0])
        elif action == "claim":
            assert row is not None and row["consumer"] == b"debugger"
        else:
            assert row is None
        assert r.xlen(shop.dlq) == (5 if action == "dead-letter" else 4)

    return Button(
        name=f"entry-{action}",
        page=lambda shop: f"/streams/{shop.stream}/entries/{shop.pending[0]}/",
        steps=(
            Step(
                row_button(lambda page, shop: _entry_row(page), label, dialog),
                lambda shop: _row_action(shop, shop.pending[0], action),
            ),
        ),
        result=lambda page, shop: toast(page, message),
        changed=changed,
        audit=action,
        audit_ids=lambda shop: [shop.pending[0]],
    )


def _retry_changed(r: redis.Redis, shop: Shop) -> None:
    row = _pending(r, shop.stream, _far(shop, 0))
    assert row is not None and row["time_since_delivered"] >= 30_000  # ACKBOARD_RETRY_IDLE_MS
    assert row["consumer"] == b"worker-a"


def _retry_later_changed(r: redis.Redis, shop: Shop) -> None:
    row = _pending(r, shop.stream, _far(shop, 4))
    assert row is not None and row["consumer"] == LATER_CONSUMER.encode()
    assert row["times_delivered"] == 1
    due = r.zscore(stream_keys(shop.stream).later("billing"), _far(shop, 4))
    assert due is not None and 0 < due - time.time() * 1000 <= 600_000


def _claim_changed(r: redis.Redis, shop: Shop) -> None:
    row = _pending(r, shop.stream, _far(shop, 1))
    assert row is not None and row["consumer"] == b"debugger"


def _dead_letter_changed(r: redis.Redis, shop: Shop) -> None:
    assert _pending(r, shop.stream, _far(shop, 2)) is None
    assert r.xlen(shop.dlq) == 5


def _acknowledge_changed(r: redis.Redis, shop: Shop) -> None:
    assert _pending(r, shop.stream, _far(shop, 3)) is None
    assert r.xlen(shop.dlq) == 4


def _press_redrive(button: str) -> Press:
    def press(page: Any, shop: Shop) -> None:
        dialog = page.locator("#redrive-dialog")
        if not dialog.evaluate("d => d.open"):
            page.locator("[data-redrive-open]").click()
        dialog.get_by_role("button", name=button, exact=True).click()

    return press


def _redrive_control(action: str) -> Press:
    """Press a control of the redrive job the page shows (its id noted for the URL); the
    page reloaded with the job, so first its first push (which renders the panel)."""

    def press(page: Any, shop: Shop) -> None:
        caught_up(page)
        job = page.locator("#redrive-panel article.redrive-job").first
        shop.seen["job"] = str(job.get_attribute("id")).removeprefix("redrive-job-")
        if action == "cancel":
            accept_confirm(page)
        job.locator(f'[data-redrive-action="{action}"]').click()

    return press


def _press_edit_replay(page: Any, shop: Shop) -> None:
    page.get_by_label("Reason (for the audit trail)").fill("amount corrected")
    page.get_by_role("button", name="Replay edited entry", exact=True).click()


def _press_produce(page: Any, shop: Shop) -> None:
    """The Produce page's editor: one field, Produce…, then its confirm dialog."""
    field = page.locator(".editor-rows fieldset").first
    field.get_by_label("Name").fill("type")
    field.get_by_label("Value").fill("order.created")
    page.get_by_role("button", name="Produce…", exact=True).click()
    confirm(page, "Produce entry")


def _press_duplicate(page: Any, shop: Shop) -> None:
    page.locator("#entry-actions").get_by_role("button", name="Duplicate", exact=True).click()
    confirm(page, "Duplicate")


def _newest_is(r: redis.Redis, shop: Shop, fields: dict[bytes, bytes]) -> None:
    [(entry_id, found)] = r.xrevrange(shop.stream, count=1)
    assert r.xlen(shop.stream) == 71 and dict(found) == fields
    assert entry_id.decode() not in shop.ids


def _redrive_changed(r: redis.Redis, shop: Shop) -> None:
    # The job is queued for the runner (not running here): nothing is replayed yet.
    assert r.xlen(shop.dlq) == 4


def _find(page: Any, shop: Shop) -> None:
    finder = page.locator("#find-pending")
    finder.locator("summary").click()
    finder.get_by_label("Field").fill("payload")
    finder.get_by_label("Value").fill('"order": 60,')
    finder.get_by_role("button", name="Search", exact=True).click()


def _jump(page: Any, shop: Shop) -> None:
    finder = page.locator("#find-pending")
    finder.locator("summary").click()
    ms = int(shop.pending[10].split("-")[0])
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000))
    finder.get_by_label("Jump to time (UTC)").fill(at)
    finder.get_by_role("button", name="Go", exact=True).click()


def _jumped_to(page: Any, shop: Shop) -> Any:
    """After Jump: the pending table starts at the entry of that second, and is in view."""
    first = page.locator("#pending-table tbody tr").first
    expect(first).to_have_attribute("id", f"pending-{shop.pending[10]}")
    return first


def _ingested(r: redis.Redis, shop: Shop, server: LiveServer) -> None:
    """Index the shop's failures now (the server's own ingestor finds a new stream only
    on its next scan)."""
    server._manage("ingest_failures", "--once")


def _cause_row(page: Any) -> Any:
    return page.locator("#cause-table tbody tr[data-fingerprint]", has_text="TimeoutError")


def _due(r: redis.Redis, shop: Shop, entry_id: str) -> bool:
    row = _pending(r, shop.stream, entry_id)
    return row is not None and row["time_since_delivered"] >= 30_000


def _unchanged(r: redis.Redis, shop: Shop) -> None:
    assert r.xlen(shop.dlq) == 4
    assert r.xpending(shop.stream, "billing")["pending"] == 56


def _retire_changed(r: redis.Redis, shop: Shop) -> None:
    assert "worker-old" not in _consumers(r, shop.stream)
    for entry_id in shop.old:
        row = _pending(r, shop.stream, entry_id)
        assert row is not None and row["consumer"] == b"worker-a"


def _reset_changed(r: redis.Redis, shop: Shop) -> None:
    assert _groups(r, shop.stream)["reporting"]["last-delivered-id"] == shop.ids[-1].encode()


def _press_retire(page: Any, shop: Shop) -> None:
    row = page.locator("#consumer-table tr", has_text="worker-old")
    press_row_action(row, "Retire")
    page.locator("dialog[open] select[name=to]").select_option("worker-a")
    confirm(page, "Retire", {"Reason (optional)": "host decommissioned"})


def _press_reset(position: str) -> Press:
    def press(page: Any, shop: Shop) -> None:
        form = page.locator("#reset-form")
        form.get_by_label(position).check()
        form.get_by_role("button", name="Preview reset…").click()

    return press


def _confirm_card(card: str, button: str) -> Press:
    def press(page: Any, shop: Shop) -> None:
        page.locator(card).get_by_role("button", name=button, exact=True).click()

    return press


Fill = dict[str, str | Callable[[Shop], str]]


def _filled(fill: Fill, shop: Shop) -> dict[str, str]:
    return {label: v if isinstance(v, str) else v(shop) for label, v in fill.items()}


def row_button(row: Callable[[Any, Shop], Any], label: str, dialog: Fill | None = None) -> Press:
    """Press ``label`` in a table row; with ``dialog``, then fill the dialog it opens and
    press its button of the same name."""

    def press(page: Any, shop: Shop) -> None:
        press_row_action(row(page, shop), label)
        if dialog is not None:
            confirm(page, label, _filled(dialog, shop))

    return press


def dialog_button(scope: str | None, label: str, dialog: Fill | None = None) -> Press:
    """Press ``label`` (inside ``scope``, or anywhere on the page), then fill the dialog it
    opens and press its button of the same name."""

    def press(page: Any, shop: Shop) -> None:
        where = page.locator(scope) if scope else page
        where.get_by_role("button", name=label, exact=True).click()
        confirm(page, label, _filled(dialog or {}, shop))

    return press


def _pending_far(n: int) -> Callable[[Any, Shop], Any]:
    return lambda page, shop: _pending_row(page, _far(shop, n))


def _holds(ok: bool) -> None:
    assert ok


def _paused_now(r: redis.Redis, shop: Shop) -> bool:
    return bool(r.exists(stream_keys(shop.stream).pause("billing")))


def _press_trim(page: Any, shop: Shop) -> None:
    form = page.locator("#trim-form")
    form.get_by_label("Delete entries older than").fill(shop.ids[4])
    form.get_by_role("button", name="Preview trim…").click()


def _press_dry_run_idle(page: Any, shop: Shop) -> None:
    form = page.locator("#retire-idle-form")
    form.locator("input[name=idle]").fill("1s")
    form.get_by_role("button", name="Dry run…").click()


def _hx_confirmed(row: Callable[[Any, Shop], Any], label: str) -> Press:
    """Press ``label`` in a row whose form asks with the browser's confirm() (hx-confirm),
    and accept it."""

    def press(page: Any, shop: Shop) -> None:
        accept_confirm(page)
        press_row_action(row(page, shop), label)

    return press


def _dlq_nth(n: int) -> Callable[[Any, Shop], Any]:
    return lambda page, shop: _dlq_row(page, shop.dead[n])


def _cause(action: str, label: str, verb: str, reason: str = "") -> Button:
    """A cause's button on the Failures page (by cause): the pending entries of billing
    whose last failure has it (the shop's eight timeouts), a dry run, then its
    confirmation, posted to the group's bulk action."""

    def press(page: Any, shop: Shop) -> None:
        if reason:
            page.locator("#cause-reason").fill(reason)
        press_row_action(_cause_row(page), label)

    def url(shop: Shop) -> str:
        return f"/streams/{shop.stream}/groups/billing/bulk/{action}/"

    def changed(r: redis.Redis, shop: Shop) -> None:
        for entry_id in shop.ids[54:62]:
            if action == "retry":
                assert _due(r, shop, entry_id)
            else:
                assert _pending(r, shop.stream, entry_id) is None
        assert r.xlen(shop.dlq) == (12 if action == "dead-letter" else 4)

    return Button(
        name=f"cause-{action}",
        page=lambda shop: f"/failures/?view=causes&stream={shop.stream}",
        live=False,
        prepare=_ingested,
        steps=(
            Step(press, url, shows=lambda page, shop: page.locator("#bulk-result .card")),
            Step(_confirm_card("#bulk-result", f"Confirm {action} of 8"), url),
        ),
        result=lambda page, shop: toast(
            page, f"{verb.capitalize()} 8 entries whose last failure has cause"
        ),
        changed=changed,
        audit=f"bulk-{action}",
        audit_ids=lambda shop: shop.ids[54:62],
    )


BUTTONS: tuple[Button, ...] = (
    # --- the group page: a pending row's buttons, far down its first page ---
    Button(
        name="retry",
        page=_group,
        steps=(
            Step(
                row_button(_pending_far(0), "Retry"), lambda s: _row_action(s, _far(s, 0), "retry")
            ),
        ),
        result=lambda page, shop: toast(page, "will be redelivered"),
        changed=_retry_changed,
        audit="retry",
        audit_ids=lambda shop: [_far(shop, 0)],
    ),
    Button(
        name="claim",
        page=_group,
        steps=(
            Step(
                row_button(_pending_far(1), "Claim", {"To consumer": "debugger"}),
                lambda s: _row_action(s, _far(s, 1), "claim"),
            ),
        ),
        result=lambda page, shop: toast(page, "claimed by debugger"),
        changed=_claim_changed,
        audit="claim",
        audit_ids=lambda shop: [_far(shop, 1)],
    ),
    Button(
        name="dead-letter",
        page=_group,
        steps=(
            Step(
                row_button(_pending_far(2), "Dead-letter", {"Reason": "poison"}),
                lambda s: _row_action(s, _far(s, 2), "dead-letter"),
            ),
        ),
        result=lambda page, shop: toast(page, "moved to the dead-letter stream"),
        changed=_dead_letter_changed,
        audit="dead-letter",
        audit_ids=lambda shop: [_far(shop, 2)],
    ),
    Button(
        name="acknowledge",
        page=_group,
        steps=(
            Step(
                row_button(_pending_far(3), "Acknowledge", {"Reason": "duplicate order"}),
                lambda s: _row_action(s, _far(s, 3), "acknowledge"),
            ),
        ),
        result=lambda page, shop: toast(page, "acknowledged (discarded)"),
        changed=_acknowledge_changed,
        audit="acknowledge",
        audit_ids=lambda shop: [_far(shop, 3)],
    ),
    Button(
        name="retry-later",
        page=_group,
        steps=(
            Step(
                row_button(_pending_far(4), "Retry later", {"or in": "10m"}),
                lambda s: _row_action(s, _far(s, 4), "retry-later"),
            ),
        ),
        result=lambda page, shop: toast(page, "will be retried in billing at"),
        changed=_retry_later_changed,
        audit="retry-later",
        audit_ids=lambda shop: [_far(shop, 4)],
    ),
    # --- the group page: the bulk bar ---
    _bulk("retry", "Retry…", "retried"),
    _bulk("retry-later", "Retry later…", "retried later", {"Retry later in": "30m"}),
    _bulk("dead-letter", "Dead-letter…", "dead-lettered"),
    _bulk("acknowledge", "Acknowledge…", "acknowledged", Reason="duplicates"),
    # --- the group page: fleet control ---
    Button(
        name="pause",
        page=_group,
        steps=(
            Step(
                dialog_button("#group-fleet", "Pause", {"Reason": "deploy"}),
                lambda s: f"{_group(s)}do/pause/",
            ),
        ),
        result=lambda page, shop: toast(page, "Paused billing"),
        changed=lambda r, shop: _holds(_paused_now(r, shop)),
        audit="pause",
    ),
    Button(
        name="resume",
        page=_group,
        prepare=_paused,
        steps=(Step(dialog_button("#group-fleet", "Resume"), lambda s: f"{_group(s)}do/resume/"),),
        result=lambda page, shop: toast(page, "Resumed billing"),
        changed=lambda r, shop: _holds(not _paused_now(r, shop)),
        audit="resume",
    ),
    Button(
        name="retire",
        page=_group,
        steps=(Step(_press_retire, lambda s: f"{_group(s)}consumers/worker-old/retire/"),),
        result=lambda page, shop: toast(page, "Retired consumer worker-old"),
        changed=_retire_changed,
        audit="retire",
    ),
    Button(
        name="retire-idle",
        page=_group,
        before_press=_idle_for_a_second,
        steps=(
            Step(
                _press_dry_run_idle,
                lambda s: f"{_group(s)}idle-consumers/",
                method="GET",
                shows=lambda page, shop: page.locator("#retire-idle-result", has_text="idle-1"),
            ),
            Step(
                _confirm_card("#retire-idle-result", "Retire 1 consumer"),
                lambda s: f"{_group(s)}do/retire-idle/",
            ),
        ),
        result=lambda page, shop: toast(page, "Retired 1 idle consumer: idle-1"),
        changed=lambda r, shop: _holds("idle-1" not in _consumers(r, shop.stream)),
        audit="retire-idle",
    ),
    # --- the group page: find and jump ---
    Button(
        name="find",
        page=_group,
        steps=(Step(_find, lambda s: f"/streams/{s.stream}/find/", method="GET"),),
        result=lambda page, shop: page.locator(f"#find-pending-{shop.ids[60]}"),
        changed=_unchanged,
    ),
    Button(
        name="jump",
        page=_group,
        steps=(Step(_jump, lambda s: f"/streams/{s.stream}/jump/", method="GET"),),
        result=_jumped_to,
        changed=_unchanged,
    ),
    # --- the group page of "reporting": administration ---
    Button(
        name="reset-position-and-undo",
        page=lambda shop: _group(shop, "reporting"),
        steps=(
            Step(
                _press_reset("the start (every entry in the stream)"),
                lambda s: f"{_group(s, 'reporting')}preview/reset-position/",
                shows=lambda page, shop: page.locator("#reset-effect"),
            ),
            Step(
                _confirm_card("#reset-result", "Confirm reset"),
                lambda s: f"{_group(s, 'reporting')}do/reset-position/",
            ),
            Step(
                _confirm_card("#reset-undo", "Undo…"),
                lambda s: f"{_group(s, 'reporting')}preview/reset-position/",
                shows=lambda page, shop: page.locator("#reset-effect"),
            ),
            Step(
                _confirm_card("#reset-result", "Confirm reset"),
                lambda s: f"{_group(s, 'reporting')}do/reset-position/",
            ),
        ),
        result=lambda page, shop: toast(page, "reset from 0-0"),
        changed=_reset_changed,
        audit="reset-position",
    ),
    Button(
        name="delete-group",
        page=lambda shop: _group(shop, "reporting"),
        steps=(
            Step(
                dialog_button(
                    "#delete-group", "Delete group", {"Type the group name to confirm": "reporting"}
                ),
                lambda s: f"{_group(s, 'reporting')}do/delete-group/",
            ),
        ),
        result=lambda page, shop: toast(page, "Group reporting deleted"),
        changed=lambda r, shop: _holds("reporting" not in _groups(r, shop.stream)),
        audit="delete-group",
    ),
    # --- the stream page ---
    Button(
        name="create-group",
        page=lambda shop: f"/streams/{shop.stream}/",
        steps=(
            Step(
                dialog_button("#create-group", "Create group", {"Group name": "audit-log"}),
                lambda s: f"/streams/{s.stream}/do/create-group/",
            ),
        ),
        result=lambda page, shop: toast(page, "Group audit-log created"),
        changed=lambda r, shop: _holds("audit-log" in _groups(r, shop.stream)),
        audit="create-group",
    ),
    Button(
        name="trim",
        page=lambda shop: f"/streams/{shop.stream}/",
        steps=(
            Step(
                _press_trim,
                lambda s: f"/streams/{s.stream}/preview/trim/",
                shows=lambda page, shop: page.locator("#trim-count"),
            ),
            Step(
                _confirm_card("#trim-result", "Confirm trim"),
                lambda s: f"/streams/{s.stream}/do/trim/",
            ),
        ),
        result=lambda page, shop: toast(page, "Trimmed 4 entries"),
        changed=lambda r, shop: _holds(r.xlen(shop.stream) == 66),
        audit="trim",
    ),
    Button(
        name="produce",
        page=lambda shop: f"/streams/{shop.stream}/produce/",
        live=False,
        steps=(Step(_press_produce, lambda s: f"/streams/{s.stream}/do/produce/"),),
        result=lambda page, shop: toast(page, f"added to {shop.stream} (1 field)"),
        changed=lambda r, shop: _newest_is(r, shop, {b"type": b"order.created"}),
        audit="produce",
    ),
    # --- the entry page (of the oldest pending entry) ---
    Button(
        name="duplicate",
        page=lambda shop: f"/streams/{shop.stream}/entries/{shop.pending[0]}/",
        steps=(
            Step(
                _press_duplicate,
                lambda s: f"/streams/{s.stream}/entries/{s.pending[0]}/do/duplicate/",
            ),
        ),
        result=lambda page, shop: toast(page, f"Entry {shop.pending[0]} duplicated as"),
        changed=lambda r, shop: _newest_is(
            r, shop, dict(r.xrange(shop.stream, shop.pending[0], shop.pending[0])[0][1])
        ),
        audit="duplicate",
        audit_ids=lambda shop: [shop.pending[0]],
    ),
    _entry_button("retry", "Retry", "will be redelivered", None),
    _entry_button("retry-later", "Retry later", "will be retried", {"or in": "2h"}),
    _entry_button("claim", "Claim", "claimed by debugger", {"To consumer": "debugger"}),
    _entry_button("dead-letter", "Dead-letter", "moved to the dead-letter stream", {}),
    _entry_button("acknowledge", "Acknowledge", "acknowledged", {"Reason": "duplicate"}),
    # --- the dead-letter page ---
    Button(
        name="replay",
        page=lambda shop: f"/streams/{shop.stream}/dlq/",
        steps=(
            Step(
                _hx_confirmed(_dlq_nth(3), "Replay"),
                lambda s: f"/streams/{s.stream}/dlq/{s.dead[3]}/replay/",
            ),
        ),
        result=lambda page, shop: toast(page, "replayed to group billing"),
        changed=lambda r, shop: _holds(r.xlen(shop.dlq) == 3 and r.xlen(shop.stream) == 71),
        audit="replay",
        audit_ids=lambda shop: [shop.dead[3]],
    ),
    Button(
        name="delete",
        page=lambda shop: f"/streams/{shop.stream}/dlq/",
        steps=(
            Step(
                _hx_confirmed(_dlq_nth(2), "Delete"),
                lambda s: f"/streams/{s.stream}/dlq/{s.dead[2]}/delete/",
            ),
        ),
        result=lambda page, shop: toast(page, f"Dead-letter entry {shop.dead[2]} deleted."),
        changed=lambda r, shop: _holds(r.xlen(shop.dlq) == 3 and r.xlen(shop.stream) == 70),
        audit="delete",
        audit_ids=lambda shop: [shop.dead[2]],
    ),
    Button(
        name="purge",
        page=lambda shop: f"/streams/{shop.stream}/dlq/",
        steps=(
            Step(
                dialog_button(
                    ".dlq-purge", "Purge", {"Type the stream name to confirm": lambda s: s.stream}
                ),
                lambda s: f"/streams/{s.stream}/dlq/purge/",
            ),
        ),
        result=lambda page, shop: toast(page, "Purged 4 dead-letter entries"),
        changed=lambda r, shop: _holds(r.xlen(shop.dlq) == 0),
        audit="purge",
    ),
    Button(
        name="redrive",
        page=lambda shop: f"/streams/{shop.stream}/dlq/",
        steps=(
            Step(
                _press_redrive("Dry run"),
                lambda s: f"/streams/{s.stream}/dlq/redrive/",
                shows=lambda page, shop: page.locator("#redrive-answer [data-redrive-count]"),
            ),
            Step(_press_redrive("Start redrive"), lambda s: f"/streams/{s.stream}/dlq/redrive/"),
        ),
        result=lambda page, shop: toast(page, "Redrive #"),
        changed=_redrive_changed,
        audit="redrive",
    ),
    Button(
        name="redrive-pause-resume",
        page=lambda shop: f"/streams/{shop.stream}/dlq/",
        steps=(
            Step(_press_redrive("Start redrive"), lambda s: f"/streams/{s.stream}/dlq/redrive/"),
            Step(_redrive_control("pause"), lambda s: f"/redrive/{s.seen['job']}/pause/"),
            Step(_redrive_control("resume"), lambda s: f"/redrive/{s.seen['job']}/resume/"),
        ),
        result=lambda page, shop: toast(page, f"Redrive #{shop.seen['job']}: running."),
        changed=_redrive_changed,
        audit="redrive-resume",
    ),
    Button(
        name="redrive-cancel",
        page=lambda shop: f"/streams/{shop.stream}/dlq/",
        steps=(
            Step(_press_redrive("Start redrive"), lambda s: f"/streams/{s.stream}/dlq/redrive/"),
            Step(_redrive_control("cancel"), lambda s: f"/redrive/{s.seen['job']}/cancel/"),
        ),
        result=lambda page, shop: toast(page, f"Redrive #{shop.seen['job']}: cancelled."),
        changed=_redrive_changed,
        audit="redrive-cancel",
    ),
    Button(
        name="edit-replay",
        page=lambda shop: f"/streams/{shop.stream}/dlq/{shop.dead[1]}/edit/",
        live=False,
        steps=(
            Step(
                _press_edit_replay,
                lambda s: f"/streams/{s.stream}/dlq/{s.dead[1]}/edit-replay/",
            ),
        ),
        result=lambda page, shop: toast(page, "replayed with edits"),
        # The dead letter is kept until the edited entry succeeds.
        changed=lambda r, shop: _holds(r.xlen(shop.stream) == 71 and r.xlen(shop.dlq) == 4),
        audit="edit-replay",
        audit_ids=lambda shop: [shop.dead[1]],
    ),
    # --- the Failures page, by cause: a cause's bulk Retry in its group ---
    _cause("retry", "Retry…", "retried"),
    _cause("dead-letter", "Dead-letter…", "dead-lettered"),
    _cause("acknowledge", "Acknowledge…", "acknowledged", reason="gateway timeouts, refunded"),
)


# --- the tier ---------------------------------------------------------------------------


@pytest.fixture
def wide_page(chromium: Any, web_server: LiveServer, login_state: Any) -> Iterator[Any]:
    """A logged-in page at the issue's 1440 x 900, JavaScript on."""
    context = chromium.new_context(viewport=VIEWPORT, storage_state=login_state)
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


def _is_action(request: Any, method: str) -> bool:
    """A request a press may have sent: htmx's (XHR) or a navigation, not a chart's data
    fetch or a static file."""
    if request.method != method or request.resource_type not in ("xhr", "fetch", "document"):
        return False
    path = urlsplit(request.url).path
    return "/chart/" not in path and not path.startswith("/static/")


def press(page: Any, button: Button, n: int, step: Step, shop: Shop) -> None:
    """Press ``step`` of ``button``; assert its request reached its own URL, answered
    2xx/3xx."""
    try:
        with page.expect_request(
            lambda request: _is_action(request, step.method), timeout=SENT_WITHIN_MS
        ) as sent:
            step.press(page, shop)
    except PlaywrightError as exc:
        if "Timeout" not in str(exc):
            raise
        pytest.fail(f"{button.name}, step {n}: pressing it sent no {step.method} request")
    request = sent.value
    want = step.url(shop)  # after the press: it may name what the page showed (a job's id)
    got = urlsplit(request.url).path
    assert got == want, f"{button.name}, step {n}: {step.method} {got}, not its own URL {want}"
    response = request.response()
    assert response is not None, f"{button.name}, step {n}: {got} got no answer"
    assert 200 <= response.status < 400, (
        f"{button.name}, step {n}: {step.method} {got} answered {response.status}"
    )
    if step.shows is not None:
        expect(step.shows(page, shop)).to_be_in_viewport()


@pytest.mark.parametrize("button", BUTTONS, ids=[b.name for b in BUTTONS])
def test_every_button_reaches_its_url_changes_redis_audits_and_shows_its_result(
    button: Button,
    wide_page: Any,
    web_server: LiveServer,
    browser_redis: redis.Redis,
    names: str,
) -> None:
    shop = _shop(browser_redis, names)
    if button.prepare is not None:
        button.prepare(browser_redis, shop, web_server)
    page = wide_page
    page.goto(web_server.url + button.page(shop))
    if button.live:
        caught_up(page)
    if button.before_press is not None:
        button.before_press(browser_redis, shop)
    for n, step in enumerate(button.steps, start=1):
        press(page, button, n, step, shop)
    result = button.result(page, shop)
    expect(result).to_be_visible()
    expect(result).to_be_in_viewport()
    button.changed(browser_redis, shop)
    audited = newest_audit(web_server, shop.stream)
    if button.audit is None:
        assert audited is None, f"{button.name} is a read, yet it wrote {audited}"
        return
    assert audited is not None, f"{button.name}: no audit row"
    action, result_, ids = audited
    assert (action, result_) == (button.audit, "ok"), audited
    assert sorted(ids) == sorted(button.audit_ids(shop)), audited


# --- the toast ----------------------------------------------------------------------------

#: The buttons in the viewport that the toast's box overlaps (none, it should be).
_COVERED = """toast => {
  const t = toast.getBoundingClientRect();
  const covered = [];
  for (const b of document.querySelectorAll("main button, main summary")) {
    const r = b.getBoundingClientRect();
    if (!r.width || r.bottom <= 0 || r.top >= innerHeight) continue;
    if (r.left < t.right && t.left < r.right && r.top < t.bottom && t.top < r.bottom) {
      covered.push(b.textContent.trim());
    }
  }
  return covered;
}"""


class ToastTests:
    def test_acting_on_a_row_far_down_shows_the_result_in_view_announced_and_dismissible(
        self, wide_page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        shop = _shop(browser_redis, names)
        page = wide_page
        page.goto(web_server.url + _group(shop))
        caught_up(page)
        expect(page.locator("#pending-table tbody tr")).to_have_count(50)
        last = _pending_row(page, shop.pending[49])
        last.scroll_into_view_if_needed()
        press_row_action(last, "Retry")
        message = toast(page, f"Entry {shop.pending[49]} will be redelivered")
        expect(message).to_be_in_viewport()
        expect(message).to_have_attribute("role", "status")
        expect(page.locator("#messages")).to_have_attribute("aria-live", "polite")
        # The operator stays where they acted: the row is still in view, under no message.
        expect(last).to_be_in_viewport()
        assert message.evaluate(_COVERED) == []
        screenshot(page, "result-toast")
        message.get_by_role("button", name="Dismiss message").click()
        expect(page.locator("#messages .flash")).to_have_count(0)

        # A refusal (a worker acknowledged the entry while the dialog was open) is an
        # alert, in view too. The ack comes after the dialog opens: before, the live
        # update could take the row away before the test pressed its menu.
        gone = shop.pending[48]
        press_row_action(_pending_row(page, gone), "Acknowledge")
        expect(page.locator("dialog[open]")).to_have_count(1)
        browser_redis.xack(shop.stream, "billing", gone)
        confirm(page, "Acknowledge", {"Reason": "duplicate"})
        refusal = toast(page, f"Entry {gone} is no longer pending in billing")
        expect(refusal).to_be_in_viewport()
        expect(refusal).to_have_attribute("role", "alert")
        assert refusal.evaluate(_COVERED) == []

    def test_without_javascript_the_message_is_at_the_top_of_the_redirected_page(
        self, no_js_page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        shop = _shop(browser_redis, names)
        page = no_js_page
        url = web_server.url + _group(shop)
        page.goto(url)
        press_row_action(_pending_row(page, shop.pending[49]), "Retry")
        page.wait_for_load_state()
        assert page.url == url  # post/redirect/get, back to the page
        message = toast(page, f"Entry {shop.pending[49]} will be redelivered")
        expect(message).to_be_in_viewport()
        expect(message).to_have_attribute("role", "status")
        # In the page's flow, at its top (nothing would dismiss a toast without JavaScript).
        assert page.locator("#messages").evaluate("e => getComputedStyle(e).position") == "static"
        assert message.get_by_role("button").count() == 0
        row = _pending(browser_redis, shop.stream, shop.pending[49])
        assert row is not None and row["time_since_delivered"] >= 30_000
