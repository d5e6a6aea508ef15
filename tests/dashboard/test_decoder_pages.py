"""A stream of msgpack, one of protobuf and one of FastStream messages, on every page.

The msgpack stream is guessed (no rule), the protobuf one is named by a rule with the
operator's descriptor set, the FastStream one is written by FastStream's own broker. Each
has a group with pending entries and a dead letter. The stream, group, entry and
dead-letter pages show each value decoded and its secret redacted; payload search finds
entries by decoded values (contains, equals and a JSON path) and never reveals a match
by a secret's value.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import urlencode

import msgpack
import pytest
import redis
from django.test import Client
from django.urls import reverse
from faststream.redis import RedisBroker
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.views.redaction import REDACTED
from queue_core.services import entry_dead_letter
from tests import decoder_samples
from tests.html import element_text, table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("page_settings")]

SECRET = "tok-SECRET"
GROUP = "g"
N = 4


def _token(i: int) -> str:
    """Entry o-1 holds the secret; the others none (a match on a field holding a redacted
    key is never shown, so only they can be found)."""
    return SECRET if i == 1 else ""


def _card(i: int) -> dict[str, object]:
    return {"card": {"api_token": SECRET}} if i == 1 else {}


def _pending(r: redis.Redis, stream: str, ids: list[str]) -> None:
    r.xgroup_create(stream, GROUP, id="0")
    r.xreadgroup(GROUP, "c1", {stream: ">"}, count=len(ids))
    entry_dead_letter(client=r, stream=stream, group=GROUP, entry_id=ids[-1], reason="poison")


def seed_msgpack(r: redis.Redis, stream: str) -> list[str]:
    ids = [
        r.xadd(stream, {"payload": msgpack.packb({"order": f"o-{i}", **_card(i)})})
        for i in range(N)
    ]
    return [i.decode() for i in ids]


def seed_protobuf(r: redis.Redis, stream: str) -> list[str]:
    ids = [
        r.xadd(stream, {"body": decoder_samples.payment(f"o-{i}", token=_token(i), cents=100 * i)})
        for i in range(N)
    ]
    return [i.decode() for i in ids]


def seed_faststream(redis_url: str, stream: str) -> None:
    async def publish() -> None:
        broker = RedisBroker(redis_url)
        await broker.connect()
        for i in range(N):
            await broker.publish(
                {"order": f"o-{i}", **({"api_token": SECRET} if i == 1 else {})},
                stream=stream,
                headers={"x-trace": "t"},
            )
        await broker.stop()

    asyncio.run(publish())


@pytest.fixture
def streams(
    r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path, page_settings: SettingsWrapper
) -> dict[str, tuple[str, str, list[str]]]:
    """kind -> (stream, field, entry ids oldest first)."""
    page_settings.ACKBOARD_PROTO_DESCRIPTORS = decoder_samples.descriptor_set(tmp_path / "s.pb")
    page_settings.ACKBOARD_DECODERS = f"{prefix}pb#body=protobuf:acme.Payment"
    out = {
        "msgpack": (prefix + "mp", "payload", seed_msgpack(r, prefix + "mp")),
        "protobuf": (prefix + "pb", "body", seed_protobuf(r, prefix + "pb")),
    }
    seed_faststream(redis_url, prefix + "fs")
    out["faststream"] = (
        prefix + "fs",
        "__data__",
        [i.decode() for i, _ in r.xrange(prefix + "fs")],
    )
    for stream, _, ids in out.values():
        _pending(r, stream, ids)
    return out


KINDS = ("msgpack", "protobuf", "faststream")
BADGES = {"msgpack": "msgpack", "protobuf": "protobuf acme.Payment", "faststream": "FastStream"}


def get(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def find(client: Client, stream: str, **params: str) -> tuple[int, list[str]]:
    url = reverse("dashboard:payload-find", args=[stream]) + "?" + urlencode(params)
    response = client.get(url, headers={"HX-Request": "true"})
    body = response.content.decode()
    return response.status_code, [cells[0] for cells in table_rows(body, "find-").values()]


@pytest.mark.parametrize("kind", KINDS)
class DecodedPagesTests:
    def test_stream_page_previews_decoded_and_redacted(
        self, viewer: Client, streams: dict[str, tuple[str, str, list[str]]], kind: str
    ) -> None:
        stream, field, ids = streams[kind]
        page = get(viewer, reverse("dashboard:stream-detail", args=[stream]))
        table = element_text(page, "entry-table")
        assert SECRET not in page
        for i in range(N):
            assert f'"order":"o-{i}"' in table, table
        assert REDACTED in table

    def test_group_page_previews_pending_entries(
        self, viewer: Client, streams: dict[str, tuple[str, str, list[str]]], kind: str
    ) -> None:
        stream, _, ids = streams[kind]
        page = get(viewer, reverse("dashboard:group-detail", args=[stream, GROUP]))
        rows = table_rows(page, "pending-")
        assert len(rows) == N - 1 and SECRET not in page
        assert any('"order":"o-0"' in " ".join(cells) for cells in rows.values()), rows

    def test_entry_page_shows_the_decoded_fields(
        self, viewer: Client, streams: dict[str, tuple[str, str, list[str]]], kind: str
    ) -> None:
        stream, _, ids = streams[kind]
        page = get(viewer, reverse("dashboard:entry-detail", args=[stream, ids[2]]))
        assert SECRET not in page
        fields = element_text(page, "entry-fields") if 'id="entry-fields"' in page else page
        assert BADGES[kind] in fields and '"order": "o-2"' in fields.replace("&quot;", '"')
        if kind == "faststream":
            assert 'FastStream headers: {"correlation_id":' in fields.replace("&quot;", '"')

    def test_dead_letter_page_shows_the_decoded_fields(
        self, viewer: Client, streams: dict[str, tuple[str, str, list[str]]], kind: str
    ) -> None:
        stream, _, _ = streams[kind]
        page = get(viewer, reverse("dashboard:dlq", args=[stream]))
        assert SECRET not in page
        assert f'"order": "o-{N - 1}"' in page.replace("&quot;", '"')

    def test_search_finds_by_decoded_values(
        self, viewer: Client, streams: dict[str, tuple[str, str, list[str]]], kind: str
    ) -> None:
        stream, field, ids = streams[kind]
        status, found = find(viewer, stream, field=field, op="contains", value='"o-2"')
        assert status == 200 and found == [ids[2]]
        status, found = find(viewer, stream, field=field, op="json", path="$.order", value="o-2")
        assert status == 200 and found == [ids[2]]
        status, found = find(
            viewer, stream, where="pending", group=GROUP, field=field, op="json",
            path="$.order", value="o-0",
        )  # fmt: skip
        assert status == 200 and found == [ids[0]]
        status, found = find(viewer, stream, where="dlq", field=field, op="contains", value="o-3")
        assert status == 200 and len(found) == 1

    def test_search_is_no_oracle_for_a_secret(
        self, viewer: Client, streams: dict[str, tuple[str, str, list[str]]], kind: str
    ) -> None:
        stream, field, _ = streams[kind]
        status, found = find(viewer, stream, field=field, op="contains", value=SECRET)
        assert status == 200 and found == []
        # o-1 holds the secret: found, but never shown (the match would reveal it).
        status, found = find(viewer, stream, field=field, op="json", path="$.order", value="o-1")
        assert status == 200 and found == []
        path = "$.card.api_token" if kind != "faststream" else "$.api_token"
        status, _ = find(viewer, stream, field=field, op="json", path=path, value=SECRET)
        assert status == 400


class SearchWithoutDecodersTests:
    def test_a_plain_json_stream_is_matched_as_before(
        self, viewer: Client, r: redis.Redis, prefix: str
    ) -> None:
        stream = prefix + "plain"
        ids = [r.xadd(stream, {"p": json.dumps({"order": f"o-{i}"})}).decode() for i in range(3)]
        assert find(viewer, stream, field="p", op="json", path="$.order", value="o-1")[1] == [
            ids[1]
        ]
        # Raw bytes, as always: the JSON text's own spacing.
        assert find(viewer, stream, field="p", op="contains", value='"order": "o-2"')[1] == [ids[2]]
