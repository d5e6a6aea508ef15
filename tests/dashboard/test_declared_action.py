"""One declaration is a whole action: a row declared here, in the test, with a tiny
service of its own (an XACK, no Lua), gets its route, its permission (after
``migrate``), its audit row, its button, its subcommand and its API action, with no
other edit anywhere."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from html.parser import HTMLParser
from io import StringIO
from typing import Any

import pytest
import redis
from django import forms
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from dashboard.access.api_tokens import token_issue
from dashboard.access.permissions import may_act
from dashboard.templatetags.ackboard_actions import action_explain
from dashboard.views import entry_actions, fleet_actions
from dashboard.views.action_cli import GROUP, STREAM, Arg, Cli, reason
from dashboard.views.action_runner import ActionResult
from dashboard.views.action_table import Action, Button, Call
from dashboard.views.actions import ACTIONS, actions_build
from dashboard.views.forms import ActionForm, TargetForm
from queue_core.connection import Client as Redis
from queue_core.services import entry_dead_letter
from tests.factories import make_pending, make_user

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("migration_data", "remote_settings"),
]

OPERATORS = importlib.import_module("dashboard.migrations.0002_roles").OPERATORS


def entry_touch(*, client: Redis, stream: str, group: str, entry_id: str) -> bool:
    """The throwaway action's service: acknowledge one entry; whether it was pending."""
    return bool(client.xack(stream, group, entry_id))


def _touch(call: Call) -> ActionResult:
    touched = entry_touch(
        client=call.client, stream=call.req.stream, group=call.req.group, entry_id=call.entry_id
    )
    if not touched:
        return ActionResult("refused", f"Entry {call.entry_id} is not pending.", status=409)
    return ActionResult("ok", f"Entry {call.entry_id} touched.", removed=True)


def _consumer_touch(call: Call) -> ActionResult:
    return ActionResult("ok", f"Consumer {call.consumer} touched.")


def touch_row(*, ask: bool) -> Action:
    """The declaration: all a new action adds besides its service."""
    return Action(
        "touch", "pending", ActionForm, _touch,
        permission="dashboard.touch_entry",
        explain="Touch acknowledges it in {group}: a test's action.",
        cli=Cli(
            "touch pending entries",
            (STREAM, GROUP, Arg(("ids",), {"nargs": "+", "metavar": "ID"}, target="id"), reason()),
        ),
        button=Button("Touch", style="danger", ask=ask),
    )  # fmt: skip


class ConsumerTouchForm(TargetForm):
    """A consumer row's form: nothing but its target."""


CONSUMER_TOUCH = Action(
    "touch-consumer", "consumer", ConsumerTouchForm, _consumer_touch,
    permission="dashboard.touch_consumer",
    explain="Touch consumer changes nothing: a test's action.",
    button=Button("Touch consumer"),
)  # fmt: skip


def _target_touch(call: Call) -> ActionResult:
    target = call.req.group or call.req.stream
    return ActionResult("ok", f"{call.req.action} of {target}: nothing changed.")


class GroupTouchForm(TargetForm):
    """A group row's form: a reason, required (its button's dialog asks for it)."""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not str(self.data.get("reason", "")).strip():
            raise forms.ValidationError("a reason is required")
        return data


#: One row of each other kind with a button: their pages show it, and it posts.
OTHER_KINDS = (
    Action(
        "touch-group", "group", GroupTouchForm, _target_touch,
        permission="dashboard.touch_group", explain="Touch group changes nothing.",
        button=Button("Touch group", reason="required"),
    ),
    Action(
        "touch-stream", "stream", ConsumerTouchForm, _target_touch,
        permission="dashboard.touch_stream", explain="Touch stream changes nothing.",
        button=Button("Touch stream", style="primary"),
    ),
    Action(
        "touch-dead-letter", "dead-letter", ActionForm, _target_touch,
        permission="dashboard.touch_dead_letter", explain="Touch dead letter changes nothing.",
        button=Button("Touch dead letter"),
    ),
)  # fmt: skip


@pytest.fixture(params=[False, True], ids=["one-click", "asks"])
def touch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Action]:
    """The row added to its kind's ``ROWS``, as a module would declare it, and the
    table rebuilt as at start-up; both put back afterwards."""
    row = touch_row(ask=request.param)
    monkeypatch.setattr(entry_actions, "ROWS", (*entry_actions.ROWS, row))
    monkeypatch.setattr(fleet_actions, "ROWS", (*fleet_actions.ROWS, CONSUMER_TOUCH, *OTHER_KINDS))
    actions_build()
    yield row
    monkeypatch.undo()
    actions_build()


class _Elements(HTMLParser):
    """Every element's tag and attributes, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))


def elements(html: str, tag: str, **attrs: str) -> list[dict[str, str]]:
    parser = _Elements()
    parser.feed(html)
    return [
        a
        for t, a in parser.found
        if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())
    ]


def _operator(django_user_model: type[User]) -> User:
    user = django_user_model.objects.create_user(username="op")
    user.groups.add(Group.objects.get(name=OPERATORS))
    return django_user_model.objects.get(pk=user.pk)


def _migrate() -> None:
    call_command("migrate", verbosity=0, interactive=False)


def _audits(action: str) -> list[tuple[str, str, list[str], str]]:
    from dashboard.models import AuditEvent

    rows = AuditEvent.objects.filter(action=action).order_by("id")
    return [(a.username, a.result, a.entry_ids, a.channel) for a in rows]


def test_a_declared_row_is_a_whole_action(
    touch: Action, r: redis.Redis, stream: str, django_user_model: type[User]
) -> None:
    ids = make_pending(r, stream, "g", "c1", 5)
    group_page = reverse("dashboard:group-detail", args=[stream, "g"])
    route = reverse("dashboard:entry-action", args=[stream, "g", ids[0], "touch"])

    # Before migrate its permission does not exist: it grants nothing (fail closed).
    assert not Permission.objects.filter(codename="touch_entry").exists()
    op = _operator(django_user_model)
    assert not may_act(op, "touch")
    web = Client()
    web.force_login(op)
    assert web.post(route, headers={"HX-Request": "true"}).status_code == 403
    assert r.xpending(stream, "g")["pending"] == 5
    assert not elements(web.get(group_page).content.decode(), "button", data_action="touch")

    # migrate creates it, named from the row, and the operators' role gets it.
    _migrate()
    made = Permission.objects.get(codename="touch_entry")
    assert made.name == "Can touch pending entries"
    assert made.content_type.app_label == "dashboard"
    assert made in Group.objects.get(name=OPERATORS).permissions.all()
    assert not Group.objects.get(name="Ackboard read-only").permissions.filter(pk=made.pk).exists()
    op = django_user_model.objects.get(pk=op.pk)
    assert may_act(op, "touch")
    web.force_login(op)

    # Its explanation.
    assert action_explain("touch", group="g") == "Touch acknowledges it in g: a test's action."

    # Its button, in each pending row's menu, posting to its route.
    page = web.get(group_page).content.decode()
    prefix = reverse("dashboard:entry-action", args=[stream, "g", "0-0", "retry"])[
        : -len("0-0/retry/")
    ]
    if touch.button is not None and touch.button.ask:
        openers = elements(page, "button", data_row_dialog="touch")
        assert [o["class"] for o in openers] == ["btn small danger"] * 5  # one a row
        [dialog] = elements(page, "dialog", id="row-dialog-touch")
        assert dialog["aria-label"] == "Touch entry"
        url = f"{prefix}{ids[1]}/touch/"  # where row_actions.js points the dialog's form
        fields = {"place": "row", "seen_consumer": "c1"}
    else:
        buttons = [
            b
            for b in elements(page, "button", form="row-retry")
            if b["formaction"].endswith("/touch/")
        ]
        assert len(buttons) == 5  # one a row
        mine = next(b for b in buttons if b["formaction"] == f"{prefix}{ids[1]}/touch/")
        assert (mine["class"], mine["name"], mine["value"]) == (
            "btn small danger",
            "seen_consumer",
            "c1",
        )
        url = mine["formaction"]
        fields = {"place": "row", mine["name"]: mine["value"]}
    pressed = web.post(url, fields, headers={"HX-Request": "true"})
    assert pressed.status_code == 200
    assert r.xpending_range(stream, "g", ids[1], ids[1], 1) == []

    # On the entry page too.
    entry_page = web.get(reverse("dashboard:entry-detail", args=[stream, ids[2]])).content.decode()
    entry_url = reverse("dashboard:entry-action", args=[stream, "g", ids[2], "touch"])
    assert [f["action"] for f in elements(entry_page, "form") if f["action"] == entry_url] == [
        entry_url
    ]

    # Its own route, and the audit rows of each attempt (the denied one included).
    assert web.post(route, headers={"HX-Request": "true"}).status_code == 200
    assert r.xpending_range(stream, "g", ids[0], ids[0], 1) == []

    # Its subcommand, as the named user.
    out = StringIO()
    call_command("ackboard", "touch", stream, "g", ids[3], "--user", "op", stdout=out)
    assert out.getvalue().strip() == f"Entry {ids[3]} touched."
    assert r.xpending_range(stream, "g", ids[3], ids[3], 1) == []

    # Its API action, and whoami lists it.
    _, token = token_issue(user=op, name="test")
    api = Client()
    bearer = {"Authorization": f"Bearer {token}"}
    answer = api.post(
        "/api/v1/actions/touch",
        json.dumps({"stream": stream, "group": "g", "id": ids[4]}),
        content_type="application/json",
        headers=bearer,
    )
    assert answer.status_code == 200, answer.content
    assert (answer.json()["result"], answer.json()["channel"]) == ("ok", "api")
    assert r.xpending_range(stream, "g", ids[4], ids[4], 1) == []
    assert r.xpending(stream, "g")["pending"] == 1  # ids[2], whose button was not pressed
    assert "touch" in api.get("/api/v1/whoami", headers=bearer).json()["actions"]

    assert _audits("touch") == [
        ("op", "refused", [ids[0]], "button"),
        ("op", "ok", [ids[1]], "button"),
        ("op", "ok", [ids[0]], "button"),
        ("op", "ok", [ids[3]], "cli"),
        ("op", "ok", [ids[4]], "api"),
    ]


def test_a_reader_gets_no_button_and_a_403(
    touch: Action, r: redis.Redis, stream: str, django_user_model: type[User]
) -> None:
    [entry_id] = make_pending(r, stream, "g", "c1", 1)
    _migrate()
    web = Client()
    web.force_login(make_user(django_user_model, "rita", "view_queues"))
    page = web.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
    assert not [b for b in elements(page, "button") if "touch" in b.get("formaction", "")]
    assert not elements(page, "dialog", id="row-dialog-touch")
    route = reverse("dashboard:entry-action", args=[stream, "g", entry_id, "touch"])
    assert web.post(route, headers={"HX-Request": "true"}).status_code == 403
    assert r.xpending(stream, "g")["pending"] == 1
    assert _audits("touch") == [("rita", "refused", [entry_id], "button")]


def test_a_consumer_row_button_opens_its_dialog(
    touch: Action, r: redis.Redis, stream: str, django_user_model: type[User]
) -> None:
    make_pending(r, stream, "g", "c1", 1)
    _migrate()
    web = Client()
    web.force_login(_operator(django_user_model))
    page = web.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
    url = reverse("dashboard:consumer-action", args=[stream, "g", "c1", "touch-consumer"])
    [opener] = elements(page, "button", data_consumer_dialog="touch-consumer")
    assert (opener["data-consumer"], opener["data-url"]) == ("c1", url)
    assert elements(page, "dialog", id="row-dialog-touch-consumer")
    answer = web.post(url, headers={"HX-Request": "true"})
    assert answer.status_code == 200
    assert _audits("touch-consumer")[0][:2] == ("op", "ok")


def _form_fields(page: str, url: str) -> dict[str, str]:
    """The hidden fields of the (one) form that posts to ``url`` in ``page``."""
    parser = _Elements()
    parser.feed(page)
    fields: dict[str, str] = {}
    inside = False
    for tag, attrs in parser.found:
        if tag == "form":
            inside = attrs.get("action") == url
        elif inside and tag == "input" and attrs.get("type") == "hidden":
            fields[attrs["name"]] = attrs.get("value", "")
    return fields


@pytest.mark.parametrize("action", [row.name for row in OTHER_KINDS])
def test_the_other_kinds_buttons_are_on_their_pages_and_post(
    touch: Action, action: str, r: redis.Redis, stream: str, django_user_model: type[User]
) -> None:
    [entry_id] = make_pending(r, stream, "g", "c1", 1)
    moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="")
    assert moved is not None
    _migrate()
    web = Client()
    web.force_login(_operator(django_user_model))
    if action == "touch-group":
        page = reverse("dashboard:group-detail", args=[stream, "g"])
        url = reverse("dashboard:group-action", args=[stream, "g", action])
    elif action == "touch-stream":
        page = reverse("dashboard:stream-detail", args=[stream])
        url = reverse("dashboard:stream-action", args=[stream, action])
    else:
        page = reverse("dashboard:dlq", args=[stream])
        url = reverse("dashboard:dlq-action", args=[stream, moved.dlq_id, action])
    html = web.get(page).content.decode()
    assert [f["action"] for f in elements(html, "form") if f["action"] == url] == [url]
    fields = _form_fields(html, url)
    assert fields["next"] == page
    if action == "touch-group":  # its dialog asks for the reason, required
        assert elements(html, "input", name="reason", required="")
        refused = web.post(url, fields, headers={"HX-Request": "true"})
        assert refused.status_code == 400
        fields["reason"] = "checked"
    answer = web.post(url, fields, headers={"HX-Request": "true"})
    assert answer.status_code == 200, answer.content
    assert [(u, res) for u, res, *_ in _audits(action)][-1] == ("op", "ok")


def test_two_rows_with_one_name_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    twice = touch_row(ask=False)
    monkeypatch.setattr(entry_actions, "ROWS", (*entry_actions.ROWS, twice, twice))
    with pytest.raises(ValueError, match="two action rows named touch"):
        actions_build()
    monkeypatch.undo()
    actions_build()
    assert "touch" not in ACTIONS


def test_a_permission_of_another_app_is_refused() -> None:
    with pytest.raises(ValueError, match="dashboard.<codename>"):
        Action("x", "pending", ActionForm, _touch, permission="auth.add_user", explain="x.")
