"""The group page's repeated rows: ``{% pending_rows rows stream group %}``,
``{% consumer_rows health [stream group retire now_ms=…] %}`` and the pending filter's
``<option>`` lists (``{% consumer_options %}``, ``{% idle_options %}``) and the fleet
banner's not-pausable names (``{% code_list %}``).

Owns the markup of one pending-table row (``_ROW`` and the action buttons below it) and of
one consumer-table row (``_CONSUMER``). A pending row repeats 50 times a page (consumer rows
once per consumer), and through the template engine each one cost about 30 node renders
(variables, filters, ``{% if %}``, tags), about 100 µs: most of the page's time. Here a
row is one ``str.format`` of values escaped once, and what is the same for every row (the
permissions, the URL prefixes, the Retry explanations) is looked up once per table. The
templates still own the tables around them (``templates/dashboard/group.html``, partials
``pending-table`` and ``consumer-table``), and the page, its live push and an action's
swapped row all render those partials, so they never differ.

A row's idle time is the instant it started (``since_span``; ackboard.js writes "3 min"),
so the table's HTML changes only when what it shows changes, and its whole rendering is
cached under ``pending_table_key``, a digest of everything it shows: a page, an htmx swap
or a live push of an unchanged table costs the key (~0.2 ms) and one cache read instead
of the rows' rendering.

Every value put into the markup goes through ``escape`` (Django's, minus its lazy
wrapper). Never touches Redis or the database; the permission checks use the request's
cached permissions.
"""

from __future__ import annotations

import contextlib
import hashlib
import unicodedata
from datetime import UTC, datetime
from html import escape as _html_escape
from typing import Any
from urllib.parse import quote

from django import template
from django.core.cache import InvalidCacheBackendError, caches
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from dashboard.display.converters import name_problem, name_segment
from dashboard.display.durations import human_ms, since_ms
from dashboard.templatetags.ackboard import copy_button, duration_span, since_span
from dashboard.templatetags.ackboard_actions import action_explain, retry_idle_ms, row_urls
from dashboard.templatetags.ackboard_buttons import consumer_buttons, pending_buttons

register = template.Library()

#: One pending row, one line high: the payload and the last failure take the width
#: (single-line, cut with an ellipsis; the full text is the cell's title and shows when the
#: cell is clicked, ackboard.js), and the actions sit in one compact menu
#: (``<details class="row-menu">``) holding the same buttons. The data- attributes are
#: what row_actions.js fills the shared dialogs from (with the id, from the row's id):
#: what the operator saw, which Claim posts back.
_ROW = (
    '<tr id="pending-{id}" data-consumer="{consumer}" data-delivered="{delivered}" '
    'data-deliveries="{deliveries}">\n'
    '  <td class="check"><input type="checkbox" name="ids" value="{id}" form="bulk-form" '
    'aria-label="Select {id}"></td>\n'
    '  <td class="mono nowrap id-cell"><a href="{entry_url}">{id}</a> {copy}</td>\n'
    '  <td class="mono consumer clip" title="{consumer}">{consumer_short}</td>\n'
    '  <td class="nowrap">{idle}{due_at}</td>\n'
    '  <td class="num">{deliveries}</td>\n'
    '  <td class="preview mono hide-sm clip" title="{preview}">{preview_cell}</td>\n'
    '  <td class="failure hide-sm clip" title="{failure}">{failure_short}</td>\n'
    '  <td class="actions-cell">{menu}</td>\n'
    "</tr>\n"
)
#: The row's actions menu: a native disclosure (it opens without JavaScript too), whose
#: list floats over the rows below, so the row keeps its height.
_MENU = (
    '<details class="row-menu"><summary class="btn small">Actions</summary>'
    '<div class="actions row-actions">{actions}</div></details>'
)
#: A row parked by Retry later: when it is due (UTC), written by the server.
_DUE_AT = ' <span class="badge due-at" data-due-ms="{ms}" title="Retry later">due at {text}</span>'
_MISSING = (
    '<span class="badge warn" title="The entry was trimmed or deleted while pending">'
    "payload missing</span>"
)
#: Retry submits the page's shared #row-retry form to this row's action URL, with the
#: consumer shown as its value (htmx and plain HTML both honour formaction, name, value).
#: ``type="submit"`` must be written out: htmx 2 remembers which button submitted a form
#: (and so takes its formaction, name and value) only for a button outside its form that
#: says so; without it htmx posted to the form's own URL, the rows' prefix (a 404).
#: What it does is said once above the table (``retry_notes``), which the button names
#: as its description: the words are not repeated in each of 50 rows.
_RETRY = (
    '<button type="submit" class="btn small" form="row-retry" formaction="{url}retry/" '
    'name="seen_consumer" value="{consumer}" aria-describedby="{explain}">Retry</button>'
)
_DUE = ' <span class="explain">already due</span>'
#: Without JavaScript these submit the empty GET form #row-open to the entry's page
#: (``type="submit"`` written out, as for Retry); row_actions.js opens the shared dialog
#: named by data-row-dialog instead.
_OPENERS = (
    ("dashboard.claim_entry", "claim", "btn small", "Claim"),
    ("dashboard.dead_letter_entry", "dead-letter", "btn small danger", "Dead-letter"),
    ("dashboard.acknowledge_entry", "acknowledge", "btn small danger", "Acknowledge"),
)
_OPENER = (
    '\n    <button type="submit" class="{css}" form="row-open" formaction="{{entry_url}}" '
    'data-row-dialog="{action}">{label}</button>'
)
#: A declared button of a pending row (``Action.button``, ``ackboard_buttons``): a submit
#: of the shared #row-retry form to the row's action URL, as Retry is; or, when it asks
#: first, an opener of its shared dialog (#row-dialog-<action>), as Claim's is.
_DECLARED_SUBMIT = (
    '\n    <button type="submit" class="{css}" form="row-retry" '
    'formaction="{{url}}{action}/" name="seen_consumer" value="{{consumer}}">{label}</button>'
)


def _declared_openers(perms: Any) -> str:
    """The declared buttons' markup for every row, with ``{url}``, ``{consumer}`` and
    ``{entry_url}`` left for each row (braces in the escaped values doubled)."""

    def text(value: str) -> str:
        return escape(value).replace("{", "{{").replace("}", "}}")

    return "".join(
        (_OPENER if asks else _DECLARED_SUBMIT).format(
            css=text(css), action=text(name), label=text(label)
        )
        for name, css, label, asks in pending_buttons(perms)
    )


#: The Retry explanations the rows' buttons point at (aria-describedby), once a table.
_RETRY_NOTES = (
    '<p class="explain small retry-notes"><span id="retry-explain">{fresh}</span>{due}</p>'
)
_RETRY_DUE_NOTE = ' <span id="retry-due-explain">Rows marked "already due": {due}</span>'


def _due_at(due_ms: int | None) -> str:
    if due_ms is None:
        return ""
    text = datetime.fromtimestamp(due_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return _DUE_AT.format(ms=int(due_ms), text=text)


def escape(value: object) -> str:
    """Django's ``escape`` without its lazy-string wrapper (the same ``html.escape``), which
    cost more than the escaping itself at 600 calls a table."""
    return _html_escape(str(value), quote=True)


def _truncated(value: str, length: int) -> str:
    """``truncatechars``: Truncator measures (and NFC-normalises) the text; a value short
    enough needs only the normalisation, which is what Truncator returns for it."""
    if len(value) <= length:
        return unicodedata.normalize("NFC", value)
    return Truncator(value).chars(length)


#: Bumped when the pending table's markup changes in a way its inputs do not show.
_TABLE_VERSION = "pending-table-5"
_ROW_PERMISSIONS = ("dashboard.retry_entry", *(perm for perm, *_ in _OPENERS))


def pending_rows_shown(rows: Any, due_ms: int) -> tuple[tuple[Any, ...], ...]:
    """The pending rows as the table shows them (``pending_table_key``, and the group
    page's content key): each row's id, owner, delivery count, delivery instant, whether
    Retry is due, preview, "payload missing" and last failure."""
    return tuple(
        (
            r.id, r.consumer, r.deliveries, r.delivered_ms, r.idle_ms >= due_ms,
            r.preview, r.payload_missing, r.last_failure, r.due_ms,
        )
        for r in rows
    )  # fmt: skip


@register.simple_tag(takes_context=True)
def pending_table_key(context: template.Context) -> str:
    """A digest of everything the ``pending-table`` partial of group.html shows, which
    keys its cached rendering (``{% cache … pending_table_key %}``: Django's fragment
    cache, the process's LocMemCache). The rendering is a function of these alone:

    - per row: id, consumer, deliveries, when it was delivered (to the second, as the
      row shows it: ``PendingRowView.delivered_ms``; the browser writes the idle time),
      whether Retry is due, the payload preview (or "missing") and the last failure;
    - the page: stream, group, snapshot id, filter, how far it looked, where it goes on;
    - what the user may do (the row buttons' permissions, the declared buttons they
      allow: ``ackboard_buttons.pending_buttons``), the due threshold (the Retry
      explanations are written from it and the group) and the URL prefixes.

    So any change in the pending list (an ack, a delivery, a claim, a new entry at the
    head), a new failure, another permission set or a setting gives another key; an old
    rendering is never served for new state. O(rows): about 0.2 ms for 50 rows (half of
    it the two URL reversals the rows need anyway).
    """
    perms = context.get("perms")
    allowed = tuple(perms is not None and name in perms for name in _ROW_PERMISSIONS)
    due_ms = retry_idle_ms()
    stream, group = context["stream"], context["group"]
    filters, page = context["filters"], context["page"]
    urls = row_urls(stream, group)
    rows = pending_rows_shown(context["rows"], due_ms)
    parts = (
        _TABLE_VERSION, stream, group, context.get("snapshot_id"),
        filters.consumer, filters.min_idle_s, filters.start,
        page.scanned, page.scanned_to, page.budget_hit, page.next_start,
        context.get("next_query"), context.get("first_query"), context.get("scan_budget"),
        allowed, tuple(pending_buttons(perms)), due_ms, urls.entry, urls.action, rows,
    )  # fmt: skip
    return hashlib.blake2b(repr(parts).encode(), digest_size=20).hexdigest()


@register.simple_tag(takes_context=True)
def pending_rows(context: template.Context, rows: Any, stream: str, group: str) -> SafeString:
    """The ``<tr>`` of each of ``rows`` (``group_page.PendingRowView``), with the buttons the
    context's ``perms`` allow. O(rows); two ``reverse`` calls and no query per table."""
    perms = context.get("perms")

    def allowed(name: str) -> bool:
        return perms is not None and name in perms

    urls = row_urls(stream, group)
    can_retry = allowed("dashboard.retry_entry")
    openers = "".join(
        _OPENER.format(css=css, action=action, label=label)
        for perm, action, css, label in _OPENERS
        if allowed(perm)
    ) + _declared_openers(perms)
    if can_retry:
        due_ms = retry_idle_ms()
    entry_prefix, action_prefix = escape(urls.entry), escape(urls.action)
    out = []
    for row in rows:
        row_id = escape(row.id)
        consumer = escape(row.consumer)
        entry_url = f"{entry_prefix}{row_id}/"
        actions = ""
        if can_retry:
            due = row.idle_ms >= due_ms
            explain = "retry-due-explain" if due else "retry-explain"
            actions = _RETRY.format(
                url=f"{action_prefix}{row_id}/", consumer=consumer, explain=explain
            ) + (_DUE if due else "")
        if openers:
            url = f"{action_prefix}{row_id}/"
            actions += openers.format(entry_url=entry_url, url=url, consumer=consumer)
        preview = escape(row.preview)
        out.append(
            _ROW.format(
                id=row_id,
                consumer=consumer,
                delivered=int(row.delivered_ms),
                deliveries=int(row.deliveries),
                entry_url=entry_url,
                copy=copy_button(row.id),
                consumer_short=escape(_truncated(row.consumer, 40)),
                idle=since_span(row.delivered_ms),
                due_at=_due_at(row.due_ms),
                preview=preview,
                preview_cell=_MISSING if row.payload_missing else preview,
                failure=escape(row.last_failure),
                failure_short=escape(_truncated(row.last_failure, 500)),
                menu=_MENU.format(actions=actions) if actions else "",
            )
        )
    return mark_safe("".join(out))  # noqa: S308 - every value above was escaped


@register.simple_tag(takes_context=True)
def retry_notes(context: template.Context, rows: Any, group: str) -> SafeString:
    """What Retry does, once above the pending table (each row's Retry button names it as
    its description), and, when a row on the page is already due, what that means. Empty
    for a user who may not retry."""
    perms = context.get("perms")
    if perms is None or "dashboard.retry_entry" not in perms:
        return mark_safe("")
    due_ms = retry_idle_ms()
    any_due = any(row.idle_ms >= due_ms for row in rows)
    due = (
        _RETRY_DUE_NOTE.format(due=escape(action_explain("retry-due", group=group)))
        if any_due
        else ""
    )
    fresh = escape(action_explain("retry", group=group))
    return mark_safe(_RETRY_NOTES.format(fresh=fresh, due=due))  # noqa: S308 - escaped


#: One consumer row: pending count linked to the pending table filtered by the consumer
#: (when its name can travel in a URL), idle and inactive times, and whether it was seen.
_CONSUMER = (
    '<tr id="consumer-row-{n}">\n'
    '  <td class="mono name">{name}</td>\n'
    '  <td class="num">{pending}</td>\n'
    "  <td>{idle}</td>\n"
    "  <td>{inactive}</td>\n"
    "  <td>{seen}</td>\n"
    "{actions}"
    "</tr>\n"
)
#: The consumer row's Retire button (``{% consumer_rows health retire_url %}``): fleet.js
#: opens the shared Retire dialog (#row-dialog-retire) for it, posting to ``data-url``.
#: A declared button of a "consumer" row is the same, opening its own shared dialog.
_CONSUMER_BUTTON = (
    '<button type="button" class="{css}" data-consumer-dialog="{action}" '
    'data-consumer="{name}" data-url="{url}">{label}</button>'
)
_ACTIONS_CELL = '  <td class="actions-cell">{buttons}</td>\n'
#: A name no URL can carry gets no button (retire it with manage.py ackboard).
_NO_RETIRE = '  <td class="actions-cell muted small" title="{why}">—</td>\n'
_NO_INACTIVE = (
    '<span class="muted" title="Redis 7.2+ reports the time since the consumer\'s last '
    'successful read">n/a</span>'
)
_NEVER_READ = '<span class="muted">never read</span>'
_LIVE = '<span class="badge ok">live</span>'
_DEAD = (
    '<span class="badge bad" title="Not seen in {window} and holding {pending} pending">'
    "dead, holds {pending}</span>"
)
_NOT_SEEN = '<span class="badge idle" title="Not seen in {window}; holds nothing">not seen</span>'


def _retire_prefix(stream: str, group: str) -> str:
    """The URL of Retire on consumer "_" of the group, without "_/retire/": one reverse
    per table."""
    url = reverse("dashboard:consumer-action", args=[stream, group, "_", "retire"])
    tail = "_/retire/"
    assert url.endswith(tail), url
    return url[: -len(tail)]


def _consumer_pending(name: Any, count: int) -> str:
    """A consumer's pending count, linked to the table filtered to it where its name can
    be put in a URL."""
    if count and isinstance(name, str) and name_problem(name) is None:
        return f'<a href="?consumer={escape(quote(name))}">{count}</a>'
    return str(count)


def _consumer_inactive(inactive_ms: int | None, since: int | None) -> str:
    if inactive_ms is None:
        return _NO_INACTIVE
    if inactive_ms < 0:
        return _NEVER_READ
    if since is None:
        return duration_span(inactive_ms)
    return since_span(since_ms(inactive_ms, since))


def _consumer_actions(name: Any, prefix: str, buttons: list[tuple[str, str, str]]) -> str:
    """A consumer's last cell: its buttons (Retire, the declared ones), or why none."""
    problem = name_problem(name) if isinstance(name, str) else "not text"
    if problem is not None:
        return _NO_RETIRE.format(why=escape(problem))
    base = f"{prefix}{name_segment(name)}/"
    cells = [
        _CONSUMER_BUTTON.format(
            css=escape(css), action=escape(action), name=escape(name),
            url=escape(f"{base}{action}/"), label=escape(label),
        )
        for action, css, label in buttons
    ]  # fmt: skip
    return _ACTIONS_CELL.format(buttons="".join(cells))


@register.simple_tag
def consumer_rows(
    health: Any,
    stream: str = "",
    group: str = "",
    retire: bool = False,
    now_ms: Any = None,
    perms: Any = None,
) -> SafeString:
    """The ``<tr>`` of each consumer of ``health`` (``queue_core.health.GroupHealth``);
    with ``retire`` (the user may retire consumers), a last cell with its Retire button,
    and the declared buttons of "consumer" rows that ``perms`` allow
    (``ackboard_buttons.consumer_buttons``: each opens its shared dialog).
    With ``now_ms`` (the instant ``health`` was read), the idle and inactive times are
    the instants they started (``since_span``: the browser writes and keeps them current,
    so the table's HTML changes only when what it shows changes); without, durations."""
    since = None if now_ms is None else int(now_ms)
    window = escape(human_ms(health.stuck_after_ms))
    buttons = ([("retire", "btn small danger", "Retire")] if retire else []) + consumer_buttons(
        perms
    )
    prefix = _retire_prefix(stream, group) if buttons else ""
    out = []
    for n, judged in enumerate(health.consumers, start=1):
        c = judged.info
        count = int(c.pending)
        if judged.seen:
            seen = _LIVE
        elif judged.holds_stuck:
            seen = _DEAD.format(window=window, pending=count)
        else:
            seen = _NOT_SEEN.format(window=window)
        out.append(
            _CONSUMER.format(
                n=n,
                name=escape(_truncated(c.name, 80)),
                pending=_consumer_pending(c.name, count),
                idle=(
                    duration_span(c.idle_ms)
                    if since is None
                    else since_span(since_ms(c.idle_ms, since))
                ),
                inactive=_consumer_inactive(c.inactive_ms, since),
                seen=seen,
                actions=_consumer_actions(c.name, prefix, buttons) if buttons else "",
            )
        )
    return mark_safe("".join(out))  # noqa: S308 - every value above was escaped


#: One ``<option>`` of the pending table's filter form.
_OPTION = '<option value="{value}"{selected}>{text}</option>'


@register.simple_tag
def consumer_options(consumers: Any, chosen: str) -> SafeString:
    """The filter's consumer choices: each consumer of the page's XINFO CONSUMERS (name
    shortened to 60 characters, its pending count), ``chosen`` selected. One
    ``str.format`` a consumer instead of a template loop (about 8 node renders each)."""
    return mark_safe(  # noqa: S308 - every value below is escaped
        "".join(
            _OPTION.format(
                value=escape(c.name),
                selected=" selected" if c.name == chosen else "",
                text=f"{escape(_truncated(str(c.name), 60))} ({int(c.pending)})",
            )
            for c in consumers
        )
    )


@register.simple_tag
def idle_options(presets: Any, chosen: int) -> SafeString:
    """The filter's "idle at least" choices (seconds; 0 is "any"), ``chosen`` selected,
    and ``chosen`` as its own last choice when it is not one of ``presets``."""
    out = [
        _OPTION.format(
            value=int(s) if s else "",
            selected=" selected" if s == chosen else "",
            text=escape(human_ms(int(s) * 1000)) if s else "any",
        )
        for s in presets
    ]
    if chosen and chosen not in presets:
        out.append(
            _OPTION.format(
                value=int(chosen), selected=" selected", text=escape(human_ms(int(chosen) * 1000))
            )
        )
    return mark_safe("".join(out))  # noqa: S308 - numbers and escaped text only


@register.simple_tag
def code_list(names: Any, length: int = 60) -> SafeString:
    """``<code>name</code>, <code>name</code>``: each name shortened to ``length``
    characters (the fleet banner's consumers a pause cannot stop)."""
    return mark_safe(  # noqa: S308 - every name is escaped
        ", ".join(f"<code>{escape(_truncated(str(name), length))}</code>" for name in names)
    )


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    """The table's rendering reads Ackboard's settings (Retry's explanations): a changed
    one (tests: ``override_settings``) empties the cached tables."""
    if setting.startswith("ACKBOARD_"):
        with contextlib.suppress(InvalidCacheBackendError):  # a test's CACHES without it
            caches["template_fragments"].clear()
