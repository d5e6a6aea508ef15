"""The group page's serving shape: light rows, shared dialogs, compressed answers.

One confirm dialog per action whatever the number of rows; every row value the pending-row
tag (``ackboard_rows``) writes into markup is escaped, attributes included; readers get
neither the buttons nor the shared forms; and HTML answers are gzipped with Django's
random-length padding (the BREACH mitigation the settings rely on).
"""

from __future__ import annotations

import gzip
import re
from typing import Any

import pytest
import redis
from django.template import Context, Template
from django.test import Client
from django.urls import reverse

from dashboard.display.durations import since_ms
from queue_core.health import group_health
from queue_core.types import ConsumerInfo
from tests.dashboard.action_helpers import MakeClient
from tests.factories import make_pending

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]

HOSTILE = 'w"><img src=x onerror=alert(1)>&amp;'


def _page(client: Client, stream: str, **headers: str) -> Any:
    return client.get(reverse("dashboard:group-detail", args=[stream, "g"]), headers=headers)


class SharedDialogTests:
    @pytest.mark.parametrize("rows", [1, 7])
    def test_one_dialog_per_action_whatever_the_rows(
        self, r: redis.Redis, stream: str, make_client: MakeClient, rows: int
    ) -> None:
        make_pending(r, stream, "g", "c1", rows)
        body = _page(make_client(), stream).content.decode()
        assert body.count('<tr id="pending-') == rows
        assert re.findall(r'<dialog [^>]*id="(row-dialog-[a-z-]+)"', body) == [
            "row-dialog-claim",
            "row-dialog-dead-letter",
            "row-dialog-acknowledge",
        ]
        assert body.count("<dialog") == 3
        # One CSRF token for the row actions (the shared forms), not one per row.
        assert body.count('name="csrfmiddlewaretoken"') <= 6
        assert body.count('form="row-retry"') == rows
        assert body.count('data-row-dialog="claim"') == rows

    def test_a_reader_gets_no_buttons_and_no_shared_forms(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        body = _page(make_client("reader", "view_queues"), stream).content.decode()
        assert body.count('<tr id="pending-') == 2
        assert "row-retry" not in body and "<dialog" not in body and "data-row-dialog" not in body

    def test_row_values_are_escaped_in_text_and_attributes(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", HOSTILE, 1)
        body = _page(make_client(), stream).content.decode()
        assert "<img src=x" not in body
        escaped = "w&quot;&gt;&lt;img src=x onerror=alert(1)&gt;&amp;amp;"
        assert f'data-consumer="{escaped}"' in body  # what the Claim dialog posts back
        assert f'name="seen_consumer" value="{escaped}"' in body  # Retry's own value
        assert f'formaction="/streams/{stream}/groups/g/entries/{entry_id}/retry/"' in body


class CompressionTests:
    def test_html_is_gzipped_with_random_length_padding(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "c1", 3)
        client = make_client()
        plain = _page(client, stream)
        assert not plain.has_header("Content-Encoding")
        sizes = set()
        for _ in range(6):
            packed = _page(client, stream, accept_encoding="gzip")
            assert packed["Content-Encoding"] == "gzip"
            assert "Accept-Encoding" in packed["Vary"]
            html = gzip.decompress(packed.content).decode()
            assert html.count('<tr id="pending-') == 3
            sizes.add(len(packed.content))
        # Django pads the gzip header with 0-100 random bytes (and masks the CSRF token
        # afresh): the same page does not compress to the same size every time.
        assert len(sizes) > 1


#: The consumer rows as the template loop wrote them before ``{% consumer_rows %}``, with
#: the idle and inactive times as durations (the tag without ``now_ms``) or, with
#: ``since``, as the instants they started (``since_span``, the tag with ``now_ms``).
_CONSUMER_LOOP = """{% load ackboard ackboard_names %}{% for ch, idle_since, inactive_since in consumers %}{% with c=ch.info %}
      <tr id="consumer-row-{{ forloop.counter }}">
        <td class="mono name">{{ c.name|truncatechars:80 }}</td>
        <td class="num">{% if c.pending and not c.name|url_problem %}<a href="?consumer={{ c.name|urlencode }}">{{ c.pending }}</a>{% else %}{{ c.pending }}{% endif %}</td>
        <td>{% if since %}{% since_span idle_since %}{% else %}{% duration_span c.idle_ms %}{% endif %}</td>
        <td>{% if c.inactive_ms is None %}<span class="muted" title="Redis 7.2+ reports the time since the consumer's last successful read">n/a</span>{% elif c.inactive_ms < 0 %}<span class="muted">never read</span>{% elif since %}{% since_span inactive_since %}{% else %}{% duration_span c.inactive_ms %}{% endif %}</td>
        <td>{% if ch.seen %}<span class="badge ok">live</span>{% elif ch.holds_stuck %}<span class="badge bad" title="Not seen in {{ health.stuck_after_ms|duration }} and holding {{ c.pending }} pending">dead, holds {{ c.pending }}</span>{% else %}<span class="badge idle" title="Not seen in {{ health.stuck_after_ms|duration }}; holds nothing">not seen</span>{% endif %}</td>
      </tr>
      {% endwith %}{% endfor %}"""  # noqa: E501


class ConsumerRowsTests:
    def test_the_tag_writes_what_the_template_loop_wrote(self) -> None:
        names = [
            "worker-1",
            '<script>alert("x")</script>',
            "a/b%c d&e",
            "cafe\u0301-decomposed",
            "x" * 120,
            "",
        ]
        infos = []
        for i, name in enumerate(names):
            # seen and idle; dead holding entries; seen holding; not seen, holding nothing
            for pending, idle, inactive in (
                (0, 5, None), (3, 90_000, -1), (7, 10, 2_000), (0, 120_000, 5),
            ):  # fmt: skip
                infos.append(ConsumerInfo(name, pending and pending + i, idle + i, inactive))
        health = group_health(
            stream="s", group="g", consumers=infos, pending=1, waiting_id=None,
            stuck_after_ms=60_000, now_ms=0,
        )  # fmt: skip
        words = " ".join

        def cells(html: str) -> list[str]:
            return [words(row.split()) for row in re.findall(r"<tr.*?</tr>", html, re.S)]

        durations = [(ch, None, None) for ch in health.consumers]
        expected = Template(_CONSUMER_LOOP).render(
            Context({"health": health, "consumers": durations, "since": False})
        )
        got = Template("{% load ackboard_rows %}{% consumer_rows health %}").render(
            Context({"health": health})
        )
        assert cells(got) == cells(expected)
        assert len(cells(got)) == len(infos)
        assert 'data-ms="90000"' in got  # a duration, written by the server

        # With now_ms: the instants the idle and inactive times started, rounded up to
        # the second (the browser writes "3 min" from them and keeps it current).
        now = 1_764_620_000_500
        instants = [
            (ch, since_ms(ch.info.idle_ms, now),
             None if ch.info.inactive_ms is None else since_ms(ch.info.inactive_ms, now))
            for ch in health.consumers
        ]  # fmt: skip
        expected = Template(_CONSUMER_LOOP).render(
            Context({"health": health, "consumers": instants, "since": True})
        )
        got = Template("{% load ackboard_rows %}{% consumer_rows health now_ms=now %}").render(
            Context({"health": health, "now": now})
        )
        assert cells(got) == cells(expected)
        assert len(cells(got)) == len(infos)
        assert 'data-since="1764619911000"' in got  # idle 90,000 ms (+ i = 1 ms) at now
        assert "data-ms=" not in got


#: The pending filter's option lists as the template loops wrote them before
#: ``{% consumer_options %}`` and ``{% idle_options %}``.
_OPTIONS_LOOP = """{% load ackboard %}{% for c in consumers %}<option value="{{ c.name }}"{% if c.name == filters.consumer %} selected{% endif %}>{{ c.name|truncatechars:60 }} ({{ c.pending }})</option>{% endfor %}
{% for s in idle_presets %}<option value="{% if s %}{{ s }}{% endif %}"{% if s == filters.min_idle_s %} selected{% endif %}>{% if s %}{% widthratio s 1 1000 as ms %}{{ ms|duration }}{% else %}any{% endif %}</option>{% endfor %}
{% if filters.min_idle_s and filters.min_idle_s not in idle_presets %}{% widthratio filters.min_idle_s 1 1000 as custom_ms %}<option value="{{ filters.min_idle_s }}" selected>{{ custom_ms|duration }}</option>{% endif %}"""  # noqa: E501


class FilterOptionsTests:
    @pytest.mark.parametrize(
        ("chosen", "min_idle_s"),
        [("", 0), ("worker-1", 60), ('<script>alert("x")</script>', 45), ("x" * 120, 86400)],
    )
    def test_the_tags_write_what_the_template_loops_wrote(
        self, chosen: str, min_idle_s: int
    ) -> None:
        from dashboard.views.group_page import IDLE_PRESETS, PendingFilters

        names = ["worker-1", '<script>alert("x")</script>', "a/b%c d&e", "cafe\u0301-x", "x" * 120]
        consumers = [ConsumerInfo(name, i * 1000, 5, None) for i, name in enumerate(names)]
        filters = PendingFilters(consumer=chosen, min_idle_s=min_idle_s, start="")
        context = {"consumers": consumers, "filters": filters, "idle_presets": IDLE_PRESETS}
        expected = Template(_OPTIONS_LOOP).render(Context(context))
        got = Template(
            "{% load ackboard_rows %}{% consumer_options consumers filters.consumer %}\n"
            "{% idle_options idle_presets filters.min_idle_s %}\n"
        ).render(Context(context))

        def options(html: str) -> list[str]:
            return re.findall(r"<option.*?</option>", html, re.S)

        assert options(got) == options(expected)
        assert len(options(got)) == len(names) + len(IDLE_PRESETS) + (min_idle_s == 45)
        # the chosen consumer (if any) and the chosen idle time (a preset, or its own)
        assert sum(" selected>" in o for o in options(got)) == (chosen != "") + 1


class CodeListTests:
    @pytest.mark.parametrize("count", [0, 1, 3])
    def test_the_tag_writes_what_the_template_loop_wrote(self, count: int) -> None:
        names = ['<script>alert("x")</script>', "x" * 120, "cafe\u0301-x"][:count]
        loop = (
            "{% for name in names %}<code>{{ name|truncatechars:60 }}</code>"
            "{% if not forloop.last %}, {% endif %}{% endfor %}"
        )
        expected = Template(loop).render(Context({"names": names}))
        got = Template("{% load ackboard_rows %}{% code_list names %}").render(
            Context({"names": names})
        )
        assert got == expected
        assert got.count("<code>") == count
