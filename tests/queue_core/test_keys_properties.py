"""Properties of the key names: no two streams share a key, and the allowlist cannot be
walked around through an alias.

Random text rarely collides, so besides ``st.text()`` the names are also built from
tokens that make collisions likely (braces, the companion suffixes, the tagged marker),
and one test enumerates every name of up to three such tokens.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_core.keys import (
    CrossSlotName,
    StreamKeys,
    allowed,
    companion_parent,
    hash_tag,
    stream_keys,
    stream_visible,
)

TOKENS = ["{", "}", ":", "a", "é", "🙂", "{a}", "{}", ":dlq", ":failures", ":ackboard", "*"]
tokens = st.lists(st.sampled_from(TOKENS), max_size=6).map("".join)
names = st.one_of(tokens, st.text(max_size=12), st.text(alphabet="{}:ad", max_size=10))
# Allowlist patterns as an operator writes them: exact names, prefixes, braces, "*".
patterns = st.lists(
    st.one_of(names, names.map(lambda n: n + "*"), names.map(lambda n: "{" + n + "*")),
    min_size=1,
    max_size=3,
).map(tuple)


def _keys(name: str) -> StreamKeys | None:
    try:
        return stream_keys(name)
    except CrossSlotName:
        return None


def _companions(name: str) -> dict[str, str]:
    keys = _keys(name)
    return {} if keys is None else {keys.dlq: "dlq", keys.failures: "failures"}


def _hashed(key: str) -> str:
    tag = hash_tag(key)
    return key if tag is None else tag


def touched(name: str) -> set[str]:
    """Every key the dashboard reads or writes for the stream ``name``: the stream itself
    (pages, actions, bulk, sockets) and its companions (DLQ page, Replay/Delete/Purge,
    overview counts, failure ingestion)."""
    return {name, *_companions(name)}


def owners(key: str, universe: list[str]) -> set[str]:
    """The names in ``universe`` whose keys include ``key``."""
    return {m for m in universe if key in touched(m)}


class InjectiveTests:
    @given(st.lists(names, unique=True, max_size=12))
    def test_no_two_streams_share_a_companion(self, streams: list[str]) -> None:
        seen: dict[str, tuple[str, str]] = {}
        for stream in streams:
            for key, kind in _companions(stream).items():
                assert key not in seen, f"{key!r} is {seen.get(key)} and ({stream!r}, {kind})"
                seen[key] = (stream, kind)

    def test_no_two_short_token_names_share_a_companion(self) -> None:
        # Exhaustive over every name of up to three tokens (about 1,900 names).
        seen: dict[str, tuple[str, str]] = {}
        done: set[str] = set()
        for n in range(1, 4):
            for parts in itertools.product(TOKENS, repeat=n):
                stream = "".join(parts)
                if stream in done:
                    continue  # the same text from other tokens
                done.add(stream)
                for key, kind in _companions(stream).items():
                    assert key not in seen, f"{key!r}: {seen.get(key)} and ({stream!r}, {kind})"
                    seen[key] = (stream, kind)
        assert seen["{a}:dlq"] == ("a", "dlq")
        assert seen["{a}:ackboard:dlq"] == ("{a}", "dlq")

    @given(names)
    def test_companions_hash_on_the_streams_text(self, stream: str) -> None:
        keys = _keys(stream)
        if keys is None:
            return
        assert _hashed(keys.dlq) == _hashed(stream)
        assert _hashed(keys.failures) == _hashed(stream)
        assert len({keys.stream, keys.dlq, keys.failures}) == 3


class CompanionParentTests:
    @given(names)
    def test_companion_parent_of_a_companion_is_its_stream(self, stream: str) -> None:
        for key in _companions(stream):
            assert companion_parent(key) == stream

    @given(names)
    def test_companion_parent_is_only_given_for_companions(self, name: str) -> None:
        parent = companion_parent(name)
        if parent is not None:
            assert name in _companions(parent)

    def test_examples(self) -> None:
        assert companion_parent("{orders}:dlq") == "orders"
        assert companion_parent("{tenant}orders:ackboard:failures") == "{tenant}orders"
        assert companion_parent("{X}:ackboard:dlq") == "{X}"
        assert companion_parent("{tenant}orders:dlq") is None  # the old tagged name
        assert companion_parent("orders:dlq") is None
        assert companion_parent("{}:dlq") is None


class AllowlistAliasTests:
    @settings(max_examples=300)
    @given(patterns, st.lists(names, min_size=1, max_size=8, unique=True))
    def test_no_key_of_a_hidden_stream_is_reached_through_a_visible_name(
        self, allow: tuple[str, ...], candidates: list[str]
    ) -> None:
        # The universe: the names, their companions (which are valid stream names too),
        # and the brace-wrapped and tagged variants that collided before.
        universe = set(candidates)
        for name in candidates:
            universe |= {"{" + name + "}", name + ":dlq", name + ":failures", *touched(name)}
        universe_list = sorted(universe)
        for name in universe_list:
            if not stream_visible(name, allow):
                continue
            assert allowed(name, allow)
            assert companion_parent(name) is None
            for key in touched(name):
                # Whoever else has this key among its keys is ``name`` itself or one of
                # its own companions (a companion is a valid stream name); never a
                # different, possibly hidden, stream.
                for other in owners(key, universe_list) - {name}:
                    assert companion_parent(other) == name, (name, key, other)

    def test_the_reported_walk_around_is_closed(self) -> None:
        allow = ("{X}*",)
        assert stream_visible("{X}", allow)
        assert not stream_visible("X", allow)
        assert not stream_visible("{X}:dlq", allow)  # X's dead letters, as a stream name
        assert not touched("X") & touched("{X}")
