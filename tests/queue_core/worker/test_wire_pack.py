"""The hot path's packer without hiredis sends the same bytes as with it.

hiredis is the wheel's ``hiredis`` extra; without it ``wire.pack`` is redis-py's Python
serializer (tests/packaging runs a Worker from a wheel installed without hiredis).
"""

from __future__ import annotations

import hiredis
import pytest

from queue_core.worker import wire

COMMANDS = [
    ("XACK", "orders", "billing", "1-0", b"2-0", "1700000000000-12"),
    ("XREADGROUP", "GROUP", "billing", "w-1", "COUNT", 100, "BLOCK", 2000, "STREAMS", "o", ">"),
    ("XACK", "{tenant1}orders", "grüppe", *[f"{n}-0" for n in range(500)]),
    ("ASKING",),
    ("SET", b"\x00\xffkey", b"v" * 70_000),
]


class PackTests:
    @pytest.mark.parametrize("args", COMMANDS, ids=lambda args: str(args[0]))
    def test_python_packs_what_hiredis_packs(self, args: tuple[object, ...]) -> None:
        assert wire.pack_python(args) == hiredis.pack_command(args)

    def test_hiredis_packs_when_it_is_installed(self) -> None:
        assert wire.pack is hiredis.pack_command
