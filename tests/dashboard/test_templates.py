"""One home per piece of markup: every confirm dialog is ``{% confirmdialog %}``
(dashboard/templatetags/ackboard_actions.py) and every pager link is _pager.html, so a
fix to either (a CSP-safe attribute, an htmx option) reaches every page. The pages'
behaviour with them is in test_actions.py, test_pages.py and the browser tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.template import Context, Template, TemplateSyntaxError
from django.template.loader import render_to_string

TEMPLATES = Path(settings.BASE_DIR) / "templates"


def _sources() -> dict[str, str]:
    return {str(p.relative_to(TEMPLATES)): p.read_text() for p in TEMPLATES.rglob("*.html")}


class OneHomeTests:
    def test_dialogs_are_the_confirm_dialog_tag(self) -> None:
        having = {name for name, text in _sources().items() if "<dialog" in text}
        assert having == set()  # no template writes one: they all use the tag
        users = {name for name, text in _sources().items() if "{% confirmdialog" in text}
        assert users == {
            "dashboard/_entry_actions.html",
            "dashboard/_dlq_actions.html",
            "dashboard/group.html",  # the pending rows' shared dialogs, one per action
            "dashboard/_admin.html",  # Create group, Delete group
            "dashboard/produce.html",  # Produce's confirm, posting the editor's fields
            "dashboard/_fleet.html",  # Pause, Resume
            "dashboard/_fleet_consumers.html",  # the consumer rows' shared Retire dialog
        }

    def test_pager_links_are_the_pager_partial(self) -> None:
        link = re.compile(r"<a\s[^>]*hx-push-url")  # the filter forms push URLs too
        having = {name for name, text in _sources().items() if link.search(text)}
        assert having == {"dashboard/_pager.html"}


class PagerTests:
    def test_a_cursor_is_appended_to_the_filter(self) -> None:
        html = render_to_string(
            "dashboard/_pager.html",
            {
                "label": "Older",
                "target": "t",
                "query": "a=1&b=2",
                "param": "before",
                "value": "5-0",
            },
        )
        href = "?a=1&amp;b=2&amp;before=5-0"
        assert html == (
            f'<a class="btn" href="{href}" hx-get="{href}" hx-target="#t" '
            'hx-swap="outerHTML" hx-push-url="true">Older</a>'
        )

    def test_a_full_url_or_the_bare_filter(self) -> None:
        newest = render_to_string(
            "dashboard/_pager.html", {"label": "Newest", "target": "t", "href": "/s/?x=<1>"}
        )
        assert re.findall(r'(?:href|hx-get)="([^"]*)"', newest) == ["/s/?x=&lt;1&gt;"] * 2
        first = render_to_string(
            "dashboard/_pager.html", {"label": "First page", "target": "t", "query": "c=w1"}
        )
        assert re.findall(r'(?:href|hx-get)="([^"]*)"', first) == ["?c=w1"] * 2


class ConfirmDialogTests:
    def test_opener_dialog_form_and_buttons(self) -> None:
        html = Template(
            "{% load ackboard_actions %}"
            '{% confirmdialog label="Purge" opener="btn danger" submit="btn danger" '
            "title=title url=url %}<input name=b value={{ body }}>{% endconfirmdialog %}"
        ).render(Context({"title": "Purge <it>", "url": "/p/", "body": "<x>"}))
        assert html.startswith('<button type="button" class="btn danger" data-open-dialog>Purge')
        assert '<dialog class="confirm" aria-label="Purge &lt;it&gt;">' in html
        assert '<form method="post" action="/p/" hx-post="/p/" hx-swap="none">' in html
        inside = html.split("<form", 1)[1].split("</form>", 1)[0]
        assert "<input name=b value=&lt;x&gt;>" in inside  # the body, escaped, in the form
        assert '<button type="submit" class="btn danger">Purge</button>' in inside
        assert '<button type="button" class="btn" data-close-dialog>Cancel</button>' in inside
        assert "onclick" not in html and "hx-on" not in html

    def test_a_missing_argument_is_a_template_error(self) -> None:
        with pytest.raises(TemplateSyntaxError, match="takes exactly"):
            Template(
                '{% load ackboard_actions %}{% confirmdialog label="x" %}{% endconfirmdialog %}'
            )

    def test_a_shared_dialog_has_an_id_and_no_opener(self) -> None:
        html = Template(
            "{% load ackboard_actions %}"
            '{% confirmdialog label="Claim" opener="" submit="btn" title="Claim entry" '
            'url="/a/" id="row-dialog-claim" %}<p>x</p>{% endconfirmdialog %}'
        ).render(Context({}))
        assert html.startswith('<dialog class="confirm" id="row-dialog-claim" aria-label="Claim')
        assert "data-open-dialog" not in html

    def test_an_unknown_argument_is_a_template_error(self) -> None:
        with pytest.raises(TemplateSyntaxError, match="takes exactly"):
            Template(
                '{% load ackboard_actions %}{% confirmdialog label="x" opener="" submit="" '
                'title="" url="" idd="y" %}{% endconfirmdialog %}'
            )
