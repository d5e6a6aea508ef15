"""The buttons the action table declares (``Action.button``), put on their kind's page.

Owns the markup of a declared button, so a new action's button needs no template of
its own: ``{% declared_buttons kind … %}`` writes a row's form (or its opener and confirm
dialog, the one ``{% confirmdialog %}`` markup) where its kind's own buttons are: a
"pending" row's on the entry page, a "dead-letter" row's in each dead letter's menu, a
"group" row's on the group page, a "stream" row's on the stream page, an "entry" row's
on the entry page (the entry itself, in no group). The group page's
pending table and consumer table are shared by many rows and (the pending one) cached
without a CSRF token, so there a declared button is a submit of the shared ``#row-retry``
form, or an opener of a shared dialog (``{% declared_row_dialogs %}``, filled by
row_actions.js or fleet.js as the hand-written ones are): ``pending_buttons`` and
``consumer_buttons`` give ``dashboard.templatetags.ackboard_rows`` their markup.

Each shows only with its row's permission (the view checks it again). Every value put
into the markup is escaped (``format_html``). It never touches Redis or the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from dashboard.templatetags.ackboard_actions import _DIALOG, _OPENER, action_explain, row_urls

if TYPE_CHECKING:  # loading the tags never loads the views
    from dashboard.views.action_table import Action, Button
register = template.Library()


def declared(on: str) -> Iterator[tuple[Action, Button]]:
    """The rows of kind ``on`` that declare a button, in the table's order."""
    from dashboard.views.actions import ACTIONS  # here: loading the tags never loads views

    for row in ACTIONS.values():
        if row.on == on and row.button is not None:
            yield row, row.button


def allowed(perms: Any, on: str) -> list[tuple[Action, Button]]:
    """The declared buttons of kind ``on`` that ``perms`` (a template's) allow."""
    return [(row, b) for row, b in declared(on) if perms is not None and row.permission in perms]


def css(button: Button, *, small: bool = True) -> str:
    return " ".join(c for c in ("btn", "small" if small else "", button.style) if c)


def _reason(button: Button) -> SafeString:
    if not button.reason:
        return mark_safe("")
    required = button.reason == "required"
    return format_html(
        '<label>Reason ({}) <input type="text" name="reason" maxlength="2000"{}></label>',
        button.reason,
        mark_safe(" required") if required else "",
    )


def _due(button: Button) -> SafeString:
    """Retry later's due-time fields: a UTC date and time, or a duration from now."""
    if not button.due:
        return mark_safe("")
    return mark_safe(
        '<label>Due at (UTC) <input type="datetime-local" name="due_at" step="1"></label> '
        '<label>or in <input type="text" name="due_in" maxlength="20" size="8" '
        'placeholder="10m, 2h, 1d"></label>'
        '<p class="explain">Times are UTC. Give one of the two.</p>'
    )


def _csrf(context: template.Context) -> dict[str, str]:
    """The CSRF field as ``{% csrf_token %}`` writes it: the page's own token, and none in
    a live push (``dashboard.live.render`` renders without one: htmx then sends the
    page's token in its X-CSRFToken header). Never a token made for a push's stand-in
    request, which the browser's cookie would not match."""
    token = context.get("csrf_token")
    return {"csrfmiddlewaretoken": str(token)} if token else {}


def _hidden(fields: dict[str, str]) -> SafeString:
    return format_html_join(
        "", '<input type="hidden" name="{}" value="{}">', ((k, v) for k, v in fields.items())
    )


def _button_html(
    row: Action,
    button: Button,
    *,
    url: str,
    fields: SafeString,
    question: SafeString,
    explain: str,
    small: bool,
) -> SafeString:
    """One declared button posting ``fields`` to ``url``: a form, or an opener and its
    confirm dialog (the ``{% confirmdialog %}`` markup, wired by ackboard.js)."""
    if not button.asks(row.on):
        return format_html(
            '<form method="post" action="{url}" hx-post="{url}" hx-swap="none" '
            'data-action="{name}">{fields}<button type="submit" class="{css}" '
            'title="{explain}">{label}</button></form>\n',
            url=url,
            name=row.name,
            fields=fields,
            css=css(button, small=small),
            explain=explain,
            label=button.label,
        )
    body = format_html(
        '{fields}<input type="checkbox" name="ids" class="live-hold" hidden disabled>'
        '{question}<p class="explain">{explain}</p>{due}{reason}',
        fields=fields,
        question=question,
        explain=explain,
        due=_due(button),
        reason=_reason(button),
    )
    opener = format_html(_OPENER, opener=css(button, small=small), label=button.label)
    submit = "btn danger" if button.style == "danger" else "btn primary"
    dialog = format_html(
        _DIALOG,
        id_attr="",
        title=button.label,
        url=url,
        body=body,
        submit=submit,
        label=button.label,
    )
    return format_html("{}{}\n", opener, dialog)


@register.simple_tag(takes_context=True)
def declared_buttons(
    context: template.Context,
    on: str,
    stream: str = "",
    group: str = "",
    row: Any = None,
    place: str = "",
) -> SafeString:
    """The declared buttons of kind ``on`` that the user may press, for one target: the
    pending entry, the entry or dead letter ``row`` (its ``id``; a pending one's ``consumer`` is
    posted as ``seen_consumer``), the ``group`` or the ``stream``. "" when none."""
    buttons = allowed(context.get("perms"), on)
    if not buttons:
        return mark_safe("")
    request = context.get("request")
    common = _csrf(context)
    if place:
        common["place"] = place
    if request is not None:
        common["next"] = request.get_full_path()
    out = []
    for action, button in buttons:
        fields = dict(common)
        try:
            url = _target_url(action, stream=stream, group=group, row=row)
        except NoReverseMatch:  # a name no URL can carry: no button (the CLI can act)
            continue
        if on == "pending":
            fields["seen_consumer"] = str(row.consumer)
            what = format_html("<p>{} entry <code>{}</code>.</p>", button.label, row.id)
        elif on == "dead-letter":
            what = format_html("<p>{} dead letter <code>{}</code>.</p>", button.label, row.id)
        elif on == "entry":
            what = format_html("<p>{} entry <code>{}</code>.</p>", button.label, row.id)
        elif on == "group":
            what = format_html("<p>{} <code>{}</code>.</p>", button.label, group)
        else:  # "stream"
            what = format_html("<p>{} <code>{}</code>.</p>", button.label, stream)
        explain = action_explain(action.name, row, group=group)
        small = on in ("pending", "dead-letter")
        out.append(
            _button_html(
                action,
                button,
                url=url,
                fields=_hidden(fields),
                question=what,
                explain=explain,
                small=small,
            )
        )
    html = format_html_join("", "{}", ((b,) for b in out))
    if on in ("group", "stream", "entry") and out:
        return format_html('<div class="actions declared-actions" data-swap-4xx>{}</div>', html)
    return html


def _target_url(action: Action, *, stream: str, group: str, row: Any) -> str:
    """The URL a declared button of one target posts to (its kind's route)."""
    if action.on == "pending":
        return reverse("dashboard:entry-action", args=[stream, group, row.id, action.name])
    if action.on == "dead-letter":
        return reverse("dashboard:dlq-action", args=[stream, row.id, action.name])
    if action.on == "entry":
        return reverse("dashboard:stream-entry-action", args=[stream, row.id, action.name])
    if action.on == "group":
        return reverse("dashboard:group-action", args=[stream, group, action.name])
    return reverse("dashboard:stream-action", args=[stream, action.name])


# --- the group page's shared tables -----------------------------------------------------


def pending_buttons(perms: Any) -> list[tuple[str, str, str, bool]]:
    """The pending table's declared buttons the user may press, as (action name, css,
    label, asks): what ``ackboard_rows.pending_rows`` writes in each row, and what keys
    the table's cached rendering."""
    return [(row.name, css(b), b.label, b.asks(row.on)) for row, b in allowed(perms, "pending")]


def consumer_buttons(perms: Any) -> list[tuple[str, str, str]]:
    """The consumer table's declared buttons the user may press: (action name, css,
    label). Each opens its shared dialog (``declared_row_dialogs``)."""
    return [(row.name, css(b), b.label) for row, b in allowed(perms, "consumer")]


@register.simple_tag(takes_context=True)
def may_act_on_rows(context: template.Context, on: str, *hand_written: str) -> bool:
    """Whether the user may press any button of the group page's ``on`` rows: one of the
    ``hand_written`` permissions, or a declared button's."""
    perms = context.get("perms")
    if perms is None:
        return False
    return any(p in perms for p in hand_written) or bool(allowed(perms, on))


@register.simple_tag(takes_context=True)
def declared_row_dialogs(context: template.Context, on: str, group: str) -> SafeString:
    """The shared dialogs of the declared buttons of the group page's ``on`` rows
    ("pending" or "consumer"), ``#row-dialog-<action>``: row_actions.js (a pending row's)
    or fleet.js (a consumer's) fills one from the row whose button was pressed and
    points its form at that row's URL."""
    request = context.get("request")
    fields = {
        **_csrf(context),
        "next": request.get_full_path() if request is not None else "",
    }
    if on == "pending":
        fields.update(place="row", seen_consumer="")
        fill, noun = "id", "entry"
    else:
        fill, noun = "consumer", "consumer"
    out = []
    for row, button in allowed(context.get("perms"), on):
        if not button.asks(on):
            continue  # a submit of the shared #row-retry form: no dialog
        if on == "pending":
            # The rows' prefix: row_actions.js appends the row's id and the action.
            url = row_urls(context["stream"], context["group"]).action
        else:  # fleet.js points the form at the pressed button's data-url
            url = reverse(
                "dashboard:consumer-action", args=[context["stream"], group, "_", row.name]
            )
        body = format_html(
            '{fields}<input type="checkbox" name="ids" class="live-hold" hidden disabled>'
            '<p>{label} {noun} <code data-fill="{fill}"></code> of <code>{group}</code>.</p>'
            '<p class="explain">{explain}</p>{due}{reason}',
            fields=_hidden(fields),
            label=button.label,
            noun=noun,
            fill=fill,
            group=group,
            explain=action_explain(row.name, group=group),
            due=_due(button),
            reason=_reason(button),
        )
        submit = "btn danger" if button.style == "danger" else "btn primary"
        out.append(
            format_html(
                _DIALOG,
                id_attr=format_html(' id="row-dialog-{}"', row.name),
                title=f"{button.label} {noun}",
                url=url,
                body=body,
                submit=submit,
                label=button.label,
            )
        )
    return format_html_join("\n", "{}", ((d,) for d in out))
