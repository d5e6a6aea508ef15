import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from queue_core.keys import (
    CrossSlotName,
    allowed,
    companion_parent,
    hash_tag,
    parse_allowlist,
    stream_keys,
)


class StreamKeysTests:
    def test_plain_stream_gets_braced_companions(self) -> None:
        keys = stream_keys("orders")
        assert (keys.dlq, keys.failures) == ("{orders}:dlq", "{orders}:failures")

    def test_stream_with_hash_tag_keeps_it_and_marks_its_companions(self) -> None:
        keys = stream_keys("{tenant1}orders")
        assert (keys.dlq, keys.failures) == (
            "{tenant1}orders:ackboard:dlq",
            "{tenant1}orders:ackboard:failures",
        )

    def test_a_braced_name_and_the_bare_name_have_different_companions(self) -> None:
        # Before: both "{X}" and "X" had "{X}:dlq", so an allowlist for one reached the other.
        assert stream_keys("X").dlq == "{X}:dlq"
        assert stream_keys("{X}").dlq == "{X}:ackboard:dlq"

    @pytest.mark.parametrize("name", ["a}b", "x{}y{z}", "}{"])
    def test_names_that_cannot_share_a_slot_are_refused(self, name: str) -> None:
        with pytest.raises(CrossSlotName, match="cannot share a cluster slot"):
            stream_keys(name)

    def test_empty_name_is_refused(self) -> None:
        with pytest.raises(CrossSlotName):
            stream_keys("")

    @given(st.text(min_size=1, max_size=40))
    def test_companions_always_share_the_slot_or_are_refused(self, name: str) -> None:
        try:
            keys = stream_keys(name)
        except CrossSlotName:
            return
        slot = key_slot(name.encode())
        assert key_slot(keys.dlq.encode()) == slot
        assert key_slot(keys.failures.encode()) == slot
        assert companion_parent(keys.dlq) == name
        assert companion_parent(keys.failures) == name

    def test_hash_tag_follows_the_cluster_rule(self) -> None:
        assert hash_tag("{a}b") == "a"
        assert hash_tag("{}a{b}") is None
        assert hash_tag("a{b") is None

    def test_ordinary_streams_are_not_companions(self) -> None:
        assert companion_parent("orders") is None
        assert companion_parent("orders:dlq") is None  # no braces: not ours


class AllowlistTests:
    def test_empty_means_everything(self) -> None:
        assert parse_allowlist("") == ("*",)
        assert parse_allowlist(None) == ("*",)

    def test_patterns_are_globs(self) -> None:
        patterns = parse_allowlist("jobs:*, emails")
        assert allowed("jobs:a", patterns)
        assert allowed("emails", patterns)
        assert not allowed("emails2", patterns)


class ImportBoundaryTests:
    def test_queue_core_never_imports_django(self) -> None:
        code = (
            "import sys, queue_core\n"
            "import pkgutil, importlib\n"
            "for m in pkgutil.walk_packages(queue_core.__path__, 'queue_core.'):\n"
            "    importlib.import_module(m.name)\n"
            "print('django' in sys.modules, 'queue_core.scripts.binding' in sys.modules)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        # Subpackages too: the second answer shows the walk reached queue_core.scripts.
        assert out.stdout.strip() == "False True"
