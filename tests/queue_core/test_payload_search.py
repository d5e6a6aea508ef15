"""Payload search against real Redis: matching rules, JSON paths, binary fields, and the
budget: a search continued until done sees every entry exactly once."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from queue_core.payload_search import (
    SearchQuery,
    dead_letter_search,
    path_parse,
    pending_search,
    search_matches,
    search_query,
    stream_search,
)
from queue_core.services import entry_dead_letter
from tests.factories import make_group


def q(field: str, op: str, value: str, path: str = "") -> SearchQuery:
    return search_query(field=field, op=op, value=value, path=path)


class MatchingTests:
    def test_equals_is_exact_bytes(self) -> None:
        fields = ((b"kind", b"order"), (b"other", b"x"))
        assert search_matches(q("kind", "equals", "order"), fields)
        assert not search_matches(q("kind", "equals", "orde"), fields)
        assert not search_matches(q("kind", "equals", "Order"), fields)
        assert not search_matches(q("missing", "equals", "order"), fields)

    def test_contains_and_empty_value(self) -> None:
        fields = ((b"body", b"hello world"),)
        assert search_matches(q("body", "contains", "lo wo"), fields)
        assert not search_matches(q("body", "contains", "bye"), fields)
        assert search_matches(q("body", "contains", ""), fields)  # has the field
        assert not search_matches(q("nope", "contains", ""), fields)

    def test_repeated_field_any_matches(self) -> None:
        fields = ((b"tag", b"a"), (b"tag", b"b"))
        assert search_matches(q("tag", "equals", "b"), fields)

    def test_binary_fields_searched_as_bytes(self) -> None:
        fields = ((b"blob", b"\xff\xfe\x00abc\x80"),)
        assert search_matches(q("blob", "contains", "abc"), fields)
        assert not search_matches(q("blob", "equals", "abc"), fields)
        assert not search_matches(q("blob", "json", "1", "$"), fields)  # not JSON: no match

    def test_unicode_value(self) -> None:
        fields = ((b"nom", "café ☕".encode()),)
        assert search_matches(q("nom", "contains", "é ☕"), fields)


class JsonPathTests:
    doc = json.dumps(
        {
            "customer": {"id": "c-1", "vip": True, "n": 1},
            "items": [{"sku": "A"}, {"sku": "B"}],
            "odd.key": {"with space": 7},
            "nothing": None,
        }
    ).encode()

    def m(self, path: str, value: str) -> bool:
        return search_matches(q("payload", "json", value, path), ((b"payload", self.doc),))

    def test_paths(self) -> None:
        assert self.m("$.customer.id", "c-1")
        assert self.m("$.customer.id", '"c-1"')  # the same search
        assert self.m("$.items[1].sku", "B")
        assert not self.m("$.items[2].sku", "B")  # out of range
        assert self.m('$["odd.key"]["with space"]', "7")
        assert self.m("$.nothing", "null")
        assert not self.m("$.customer.missing", "null")  # missing is not null
        assert self.m("$.customer", '{"n": 1, "vip": true, "id": "c-1"}')

    def test_types_are_strict(self) -> None:
        assert self.m("$.customer.vip", "true")
        assert not self.m("$.customer.vip", "1")
        assert not self.m("$.customer.n", "true")
        assert self.m("$.customer.n", "1.0")  # 1 equals 1.0
        assert not self.m("$.customer.n", '"1"')  # a string is not a number

    def test_index_on_object_and_key_on_array(self) -> None:
        assert not self.m("$.customer[0]", "c-1")
        assert not self.m("$.items.sku", "A")

    def test_whole_document_and_non_json(self) -> None:
        fields = ((b"payload", b"42"),)
        assert search_matches(q("payload", "json", "42", "$"), fields)
        assert not search_matches(q("payload", "json", "42", "$"), ((b"payload", b"{bad"),))

    @pytest.mark.parametrize(
        "bad",
        ["customer.id", "$.", "$..a", "$[x]", '$["open', "$.a b", "$[-1]", "$." + ".a" * 40],
    )
    def test_bad_paths_say_why(self, bad: str) -> None:
        with pytest.raises(ValueError):
            path_parse(bad)

    def test_path_parse(self) -> None:
        assert path_parse("$") == ()
        assert path_parse('$.a[0]["b\\"c"].d-e') == ("a", 0, 'b"c', "d-e")

    def test_query_checks(self) -> None:
        with pytest.raises(ValueError, match="unknown match"):
            q("f", "regex", "x")
        with pytest.raises(ValueError, match="which field"):
            q("", "equals", "x")
        with pytest.raises(ValueError, match="at most"):
            q("f", "equals", "x" * 20_000)


def _fill(r: redis.Redis, key: str, n: int) -> list[str]:
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(key, {"n": str(i), "kind": "hit" if i % 3 == 0 else "miss"})
    return [i.decode() for i in pipe.execute()]


class BudgetTests:
    def test_continue_covers_everything_exactly_once(self, r: redis.Redis, stream: str) -> None:
        ids = _fill(r, stream, 103)
        want = {i for n, i in enumerate(ids) if n % 3 == 0}
        seen: list[str] = []
        scanned = 0
        after = None
        rounds = 0
        while True:
            got = stream_search(
                client=r,
                stream=stream,
                query=q("kind", "equals", "hit"),
                after=after,
                max_entries=10,
                chunk=4,
            )
            rounds += 1
            assert got.total == 103
            seen += [e.id for e in got.matches]
            scanned += got.scanned
            if got.done:
                break
            assert got.stopped_by == "entries"
            assert got.scanned == 10
            after = got.cursor
        assert scanned == 103
        assert len(seen) == len(set(seen))
        assert set(seen) == want
        assert seen == sorted(seen, key=lambda i: [int(p) for p in i.split("-")], reverse=True)
        assert rounds == 11

    def test_match_budget_stops_at_the_match_and_resumes_after_it(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = _fill(r, stream, 30)
        query = q("kind", "equals", "hit")
        first = stream_search(client=r, stream=stream, query=query, max_matches=2)
        assert first.stopped_by == "matches"
        assert first.cursor == first.matches[-1].id
        rest = stream_search(client=r, stream=stream, query=query, after=first.cursor)
        assert rest.done
        found = [e.id for e in first.matches + rest.matches]
        assert sorted(found) == sorted(i for n, i in enumerate(ids) if n % 3 == 0)

    def test_time_budget_stops(self, r: redis.Redis, stream: str) -> None:
        _fill(r, stream, 50)
        got = stream_search(
            client=r, stream=stream, query=q("kind", "equals", "hit"), max_ms=0, chunk=5
        )
        assert not got.done
        assert got.stopped_by == "time"
        assert got.scanned == 1

    def test_missing_stream_and_bad_cursor(self, r: redis.Redis, stream: str) -> None:
        got = stream_search(client=r, stream=stream, query=q("a", "equals", "b"))
        assert got.done and got.scanned == 0 and got.total == 0
        with pytest.raises(ValueError, match="search cursor"):
            stream_search(client=r, stream=stream, query=q("a", "equals", "b"), after="x")

    def test_dead_letters(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        r.xadd(stream, {"payload": '{"customer": {"id": "c-9"}}'})
        r.xadd(stream, {"payload": '{"customer": {"id": "c-1"}}'})
        entries: Any = r.xreadgroup("g", "c", {stream: ">"})
        for entry_id, _ in entries[0][1]:
            entry_dead_letter(
                client=r, stream=stream, group="g", entry_id=entry_id.decode(), reason="bad"
            )
        got = dead_letter_search(
            client=r, stream=stream, query=q("payload", "json", "c-9", "$.customer.id")
        )
        assert got.done and got.total == 2 and len(got.matches) == 1
        by_reason = dead_letter_search(
            client=r, stream=stream, query=q("ackboard.reason", "equals", "bad")
        )
        assert len(by_reason.matches) == 2

    def test_pending_continue_exactly_once(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        ids = _fill(r, stream, 25)
        r.xreadgroup("g", "c", {stream: ">"}, count=100)
        r.xack(stream, "g", ids[3])  # no longer pending
        r.xdel(stream, ids[6])  # pending, payload gone: never matches
        seen: list[str] = []
        scanned = 0
        after = None
        while True:
            got = pending_search(
                client=r,
                stream=stream,
                group="g",
                query=q("kind", "equals", "hit"),
                after=after,
                max_entries=7,
                chunk=3,
            )
            assert got.total == 24
            seen += [e.id for e in got.matches]
            scanned += got.scanned
            if got.done:
                break
            after = got.cursor
        assert scanned == 24
        assert seen == [i for n, i in enumerate(ids) if n % 3 == 0 and n not in (3, 6)]

    def test_pending_unknown_group(self, r: redis.Redis, stream: str) -> None:
        r.xadd(stream, {"a": "b"})
        with pytest.raises(redis.ResponseError):
            pending_search(client=r, stream=stream, group="nope", query=q("a", "equals", "b"))
