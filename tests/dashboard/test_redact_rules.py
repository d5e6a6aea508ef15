"""Redaction rules per stream pattern (``ACKBOARD_REDACT_RULES``), on every payload surface.

Two streams hold the same entry: one a rule names (``…orders:*=card_number|cvv``), one no
rule names. On the first, the rule's fields are masked on the stream page's previews, the
group page's pending previews, the entry page, the dead-letter page and its editor, as a
field, inside JSON and inside msgpack, and payload search neither accepts them nor
reports a match by their values; on the second they show, and search finds them. The
global pattern applies on both. Then the rules' syntax, and a malformed rule stopping
``manage.py check``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from urllib.parse import urlencode

import msgpack
import pytest
import redis
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.display.redact_rules import RedactRule, redaction_pattern, rules_parse
from dashboard.views.redaction import REDACTED
from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.dashboard.test_config_errors import KEY, _env, _one_line, _run
from tests.factories import make_user
from tests.html import table_rows

pytestmark = [pytest.mark.django_db]

GROUP = "g"
CARD = "4111-CARDSECRET"
CVV_JSON = "CVV-JSONSECRET"
CVV_PACKED = "CVV-PACKSECRET"
GLOBAL = "tok-GLOBALSECRET"
RULE_SECRETS = (CARD, CVV_JSON, CVV_PACKED)
FIELDS = {
    "card_number": CARD,
    "doc": json.dumps({"order": "o-1", "cvv": CVV_JSON}),
    "packed": msgpack.packb({"order": "o-1", "cvv": CVV_PACKED}),
    "api_token": GLOBAL,
}


@pytest.fixture
def world(
    r: redis.Redis, prefix: str, settings: SettingsWrapper, redis_url: str
) -> dict[str, list[str]]:
    """stream -> entry ids (three, the last dead-lettered) for a masked and a plain stream."""
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_REDACT_RULES = f"{prefix}orders:*=card_number|cvv; {prefix}x=iban"
    out = {}
    for stream in (prefix + "orders:eu", prefix + "mail"):
        ids = [r.xadd(stream, FIELDS).decode() for _ in range(3)]
        r.xgroup_create(stream, GROUP, id="0")
        r.xreadgroup(GROUP, "c1", {stream: ">"}, count=3)
        entry_dead_letter(client=r, stream=stream, group=GROUP, entry_id=ids[-1], reason="p")
        out[stream] = ids
    return out


@pytest.fixture
def editor(client: Client, django_user_model: type[User]) -> Client:
    """A reader who may also edit and replay dead letters (the editor shows the fields)."""
    client.force_login(make_user(django_user_model, "ed", "view_queues", "edit_replay_dead_letter"))
    return client


def _pages(client: Client, stream: str, ids: list[str]) -> dict[str, str]:
    urls = {
        "stream": reverse("dashboard:stream-detail", args=[stream]),
        "group": reverse("dashboard:group-detail", args=[stream, GROUP]),
        "entry": reverse("dashboard:entry-detail", args=[stream, ids[0]]),
        "dlq": reverse("dashboard:dlq", args=[stream]),
    }
    out = {}
    for name, url in urls.items():
        response = client.get(url)
        assert response.status_code == 200, (name, response.content[:300])
        out[name] = response.content.decode().replace("&quot;", '"')
    return out


def _find(client: Client, stream: str, **params: str) -> tuple[int, list[str]]:
    url = reverse("dashboard:payload-find", args=[stream]) + "?" + urlencode(params)
    response = client.get(url, headers={"HX-Request": "true"})
    rows = table_rows(response.content.decode(), "find-")
    return response.status_code, [cells[0] for cells in rows.values()]


def test_a_rule_masks_its_fields_on_its_streams_only_on_every_page(
    editor: Client, prefix: str, world: dict[str, list[str]]
) -> None:
    masked, plain = (
        _pages(editor, prefix + "orders:eu", world[prefix + "orders:eu"]),
        _pages(editor, prefix + "mail", world[prefix + "mail"]),
    )
    for name, page in masked.items():
        assert not [s for s in (*RULE_SECRETS, GLOBAL) if s in page], name
        assert REDACTED in page, name
    for name, page in plain.items():
        assert GLOBAL not in page, name
        assert CARD in page, name  # the first field: in every preview too
    for name in ("entry", "dlq"):  # the whole fields, JSON and msgpack inside them
        assert f'"cvv": "{CVV_JSON}"' in plain[name] and f'"cvv": "{CVV_PACKED}"' in plain[name]
        assert f'"cvv": "{REDACTED}"' in masked[name] and '"order": "o-1"' in masked[name]


def test_the_dead_letter_editor_follows_the_rules(
    editor: Client, prefix: str, r: redis.Redis, world: dict[str, list[str]]
) -> None:
    for stream, shown in ((prefix + "orders:eu", False), (prefix + "mail", True)):
        dlq_id = r.xrange(stream_keys(stream).dlq)[0][0].decode()
        response = editor.get(reverse("dashboard:dlq-edit", args=[stream, dlq_id]))
        assert response.status_code == 200, response.content[:300]
        page = response.content.decode()
        assert (CARD in page) is shown and GLOBAL not in page


def test_search_refuses_a_ruled_field_and_never_matches_by_its_value(
    editor: Client, prefix: str, world: dict[str, list[str]]
) -> None:
    masked, plain = prefix + "orders:eu", prefix + "mail"
    every = world[plain][::-1]  # newest first
    assert _find(editor, masked, field="card_number", value="4111")[0] == 400
    assert _find(editor, masked, field="doc", op="json", path="$.cvv", value=CVV_JSON)[0] == 400
    assert _find(editor, masked, field="doc", value=CVV_JSON) == (200, [])
    assert _find(editor, masked, field="packed", value=CVV_PACKED) == (200, [])
    assert _find(editor, masked, where="dlq", field="doc", value=CVV_JSON) == (200, [])
    assert _find(editor, plain, field="card_number", value="4111") == (200, every)
    assert _find(editor, plain, field="doc", value=CVV_JSON) == (200, every)
    assert _find(editor, plain, field="packed", value=CVV_PACKED) == (200, every)
    assert _find(editor, plain, field="api_token", value="tok")[0] == 400


def test_the_rules_syntax_and_the_pattern_a_stream_gets() -> None:
    text = "orders:*=card_number|cvv;\n billing:invoices = iban ; o?ders:eu=x=y"
    assert rules_parse(text) == (
        RedactRule("orders:*", "card_number|cvv"),
        RedactRule("billing:invoices", "iban"),
        RedactRule("o?ders:eu", "x=y"),
    )
    assert redaction_pattern("key", text, "orders:eu") == "(?:key)|(?:card_number|cvv)|(?:x=y)"
    assert redaction_pattern("key", text, "billing:invoices") == "(?:key)|(?:iban)"
    assert redaction_pattern("key", text, "billing:invoices:dlq") == "key"
    assert redaction_pattern("key", text, None) == "key"
    assert redaction_pattern("", text, "billing:invoices") == "(?:iban)"
    assert redaction_pattern("key", "", "orders:eu") == "key"


@pytest.mark.parametrize(
    ("rules", "says"),
    [
        ("orders:*", "'orders:*' is not STREAM_PATTERN=FIELD_REGEX"),
        ("orders:*=card(", "'orders:*=card(': the field regex is not valid"),
        ("=cvv", "A stream pattern may not be empty"),
        ("orders:*= ", "the field regex is empty"),
        ("a\x01=cvv", "may not contain control characters"),
    ],
)
def test_a_malformed_rule_says_what_is_wrong(rules: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        rules_parse(rules)


def test_a_malformed_rule_stops_manage_check(tmp_path: Path) -> None:
    env = _env(tmp_path, DJANGO_SECRET_KEY=KEY, ACKBOARD_REDACT_RULES="orders:*=card(")
    _one_line(
        _run([sys.executable, "manage.py", "check"], env),
        "ACKBOARD_REDACT_RULES: 'orders:*=card(': the field regex is not valid",
    )


def test_a_rule_that_cannot_join_the_global_pattern_stops_manage_check(tmp_path: Path) -> None:
    env = _env(
        tmp_path,
        DJANGO_SECRET_KEY=KEY,
        ACKBOARD_REDACT_PATTERN="(?i)key",
        ACKBOARD_REDACT_RULES="a=b",
    )
    _one_line(_run([sys.executable, "manage.py", "check"], env), "does not combine")
