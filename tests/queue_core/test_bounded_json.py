"""queue_core.bounded_json: the one JSON reader, its bounds, and that nothing else parses JSON.

Pure tests of ``json_read`` (the depth and size boundaries, numbers, RecursionError
mapped, valid JSON read exactly as ``json.loads`` reads it, hostile text never raising
anything but ValueError), and an AST walk of every production module of ``queue_core/``
and ``dashboard/`` (migrations excluded) that fails on any JSON parsing outside the reader.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_core.bounded_json import MAX_DEPTH, MAX_SIZE, BoundedJSONError, json_read
from tests.hostile_json import hostile_json

ROOT = Path(__file__).resolve().parents[2]
#: (opening, innermost, closing) of one level of nesting, each shape counted the same.
LEVELS = [("[", "", "]"), ('{"a":', "1", "}"), ("[", "1", "]"), ('{"a":[', "0", "]}")]


def nested(depth: int, opening: str = "[", inner: str = "", closing: str = "]") -> str:
    """``depth`` levels of ``opening``; for the two-bracket shapes, 2 x levels."""
    return opening * depth + inner + closing * depth


def levels(opening: str) -> int:
    return opening.count("[") + opening.count("{")


class DepthTests:
    @pytest.mark.parametrize(("opening", "inner", "closing"), LEVELS)
    @pytest.mark.parametrize("max_depth", [0, 1, 5, MAX_DEPTH])
    def test_the_bound_is_read_and_one_level_more_is_refused(
        self, opening: str, inner: str, closing: str, max_depth: int
    ) -> None:
        per = levels(opening)
        within = max_depth // per
        if within:
            text = nested(within, opening, inner, closing)
            assert json_read(text, max_depth=max_depth) == json.loads(text)
        over = nested(max_depth // per + 1, opening, inner, closing)
        with pytest.raises(BoundedJSONError, match=f"nested deeper than {max_depth} levels") as e:
            json_read(over, max_depth=max_depth)
        assert e.value.bound == "depth"

    def test_the_default_bound_is_64(self) -> None:
        assert json_read(nested(64)) == json.loads(nested(64))
        with pytest.raises(BoundedJSONError):
            json_read(nested(65))

    @pytest.mark.parametrize("depth", [1000, 1500, 100_000])
    def test_what_python_cannot_parse_is_refused_before_it_tries(self, depth: int) -> None:
        with pytest.raises(RecursionError):
            json.loads(nested(depth))
        for text in (nested(depth), "[" * depth, '{"a":' * depth, "[{" * depth):
            with pytest.raises(BoundedJSONError, match="nested deeper than 64 levels"):
                json_read(text)

    def test_brackets_inside_strings_do_not_count(self) -> None:
        text = json.dumps(["[" * 5000, "{" * 5000, {"k": "]" * 5000}])
        assert json_read(text) == json.loads(text)

    def test_an_escaped_quote_does_not_end_a_string(self) -> None:
        inside = json.dumps(['\\"' + "[" * 500])  # the brackets are in the string
        assert json_read(inside) == json.loads(inside)
        outside = '["\\\\",' + "[" * 500  # the string is "\\"; the brackets are not in it
        with pytest.raises(BoundedJSONError):
            json_read(outside)

    def test_an_unterminated_string_cannot_hide_brackets_the_parser_would_reach(self) -> None:
        with pytest.raises(ValueError):
            json_read('"' + "[" * 5000)
        with pytest.raises(BoundedJSONError):
            json_read("[" * 5000 + '"')

    def test_stray_closers_do_not_hide_openers(self) -> None:
        with pytest.raises(BoundedJSONError):
            json_read("]" * 5000 + "[" * 5000)
        with pytest.raises(ValueError):
            json_read("]" * 100 + "[" * 10)


@contextmanager
def stack_room(frames: int) -> Iterator[None]:
    """Python's recursion limit set ``frames`` above the current depth, then restored."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back  # type: ignore[assignment]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


class RecursionTests:
    def test_a_recursion_error_within_the_bound_is_the_same_refusal(self) -> None:
        text = nested(60)
        with stack_room(30), pytest.raises(BoundedJSONError, match="nested too deep") as e:
            json_read(text)
        assert e.value.bound == "depth"
        assert isinstance(e.value.__cause__, RecursionError)
        assert json_read(text) == json.loads(text)


class SizeTests:
    def test_the_size_bound_is_read_and_one_more_is_refused(self) -> None:
        text = json.dumps("x" * 98)  # 100 characters
        assert json_read(text, max_size=100) == "x" * 98
        assert json_read(text.encode(), max_size=100) == "x" * 98
        with pytest.raises(BoundedJSONError, match="longer than 99 characters") as e:
            json_read(text, max_size=99)
        assert e.value.bound == "size"
        with pytest.raises(BoundedJSONError, match="longer than 99 bytes"):
            json_read(text.encode(), max_size=99)

    def test_the_default_size_and_none(self) -> None:
        big = json.dumps("x" * MAX_SIZE)
        with pytest.raises(BoundedJSONError):
            json_read(big)
        assert json_read(big, max_size=None) == "x" * MAX_SIZE


class NumberTests:
    def test_numbers_are_bounded_only_when_asked(self) -> None:
        assert json_read("1" * 4000) == int("1" * 4000)
        assert json_read("1e999") == float("inf")  # json.loads's own answer
        with pytest.raises(BoundedJSONError, match="a number longer than 10 digits") as e:
            json_read("[12345678901]", max_digits=10)
        assert e.value.bound == "number"
        with pytest.raises(BoundedJSONError, match="a number out of range"):
            json_read('{"a": 1e999}', max_digits=4000)
        assert json_read('["1e999", 1234567890]', max_digits=10) == ["1e999", 1234567890]

    def test_pythons_own_int_guard_is_a_value_error(self) -> None:
        with pytest.raises(ValueError):
            json_read("1" * 5000)


class DecodingTests:
    @pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-32"])
    def test_bytes_are_decoded_as_json_loads_decodes_them(self, encoding: str) -> None:
        raw = json.dumps({"é": ["[", 1]}, ensure_ascii=False).encode(encoding)
        assert json_read(raw) == json.loads(raw)
        assert json_read(bytearray(raw)) == json.loads(raw)

    def test_bytes_that_are_no_text_are_a_value_error(self) -> None:
        with pytest.raises(ValueError):
            json_read(b'"\xff\xfe\xfa"')

    def test_strict_false_accepts_raw_newlines_in_strings(self) -> None:
        with pytest.raises(json.JSONDecodeError):
            json_read('"a\nb"')
        assert json_read('"a\nb"', strict=False) == "a\nb"


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=40,
)


class PropertyTests:
    @settings(max_examples=100, deadline=None)
    @given(value=JSON_VALUES, as_bytes=st.booleans())
    def test_valid_json_reads_as_json_loads_reads_it(self, value: Any, as_bytes: bool) -> None:
        text = json.dumps(value, ensure_ascii=False)
        data = text.encode() if as_bytes else text
        assert json_read(data, max_size=None) == json.loads(data)

    @settings(max_examples=100, deadline=None)
    @given(text=hostile_json(), as_bytes=st.booleans())
    def test_hostile_text_is_read_or_refused_never_raised_otherwise(
        self, text: str, as_bytes: bool
    ) -> None:
        data = text.encode() if as_bytes else text
        try:
            value = json_read(data, max_size=None)
        except ValueError:
            return
        # Compared as text: NaN, which hostile text may hold, is not equal to itself.
        assert json.dumps(value) == json.dumps(json.loads(data))


# --- no JSON parsing outside the reader ----------------------------------------------------

#: The reader itself: the one module allowed to call the standard parser.
READER = Path("queue_core/bounded_json.py")
#: Modules that parse JSON (the standard library's parts, and the usual third-party ones).
JSON_MODULES = {"json", "json.decoder", "json.scanner", "simplejson", "orjson", "ujson",
                "rapidjson", "msgspec", "simdjson", "pysimdjson"}  # fmt: skip
#: Names that parse JSON, wherever they come from.
PARSING_NAMES = {"loads", "load", "JSONDecoder", "raw_decode", "scanstring", "make_scanner",
                 "py_scanstring", "c_scanstring", "decode"}  # fmt: skip


def json_parsing(source: str) -> list[str]:
    """Each place in ``source`` that parses JSON, or could (``json.loads``, ``json.load``,
    a ``JSONDecoder``, ``raw_decode``, anything imported from a JSON module but dumping):
    ``"<line>: <what>"``."""
    found: list[str] = []
    json_names: set[str] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in JSON_MODULES and alias.name != "json":
                    found.append(f"{node.lineno}: import {alias.name}")
                if alias.name.split(".")[0] == "json":
                    json_names.add(alias.asname or "json")
        elif isinstance(node, ast.ImportFrom) and node.module in JSON_MODULES:
            for alias in node.names:
                if node.module != "json" or alias.name in PARSING_NAMES:
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in json_names:
                if node.attr in PARSING_NAMES or node.attr in ("decoder", "scanner"):
                    found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
            elif node.attr == "raw_decode":
                found.append(f"{node.lineno}: .raw_decode")
    return found


def production_modules() -> list[Path]:
    paths = []
    for package in ("queue_core", "dashboard"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "migrations" not in relative.parts and relative != READER:
                paths.append(relative)
    return paths


class ParseSiteTests:
    def test_no_production_module_parses_json_but_the_reader(self) -> None:
        modules = production_modules()
        assert Path("dashboard/views/payloads.py") in modules and len(modules) > 100
        found = {
            str(path): sites
            for path in modules
            if (sites := json_parsing((ROOT / path).read_text(encoding="utf-8")))
        }
        assert found == {}, "parse JSON through queue_core.bounded_json.json_read"

    @pytest.mark.parametrize(
        "source",
        [
            "import json\njson.loads(x)",
            "import json\nwith open(p) as f:\n    json.load(f)",
            "import json as j\nj.loads(x)",
            "import json\njson.JSONDecoder().decode(x)",
            "import json\njson.decoder.JSONDecoder()",
            "import json.decoder",
            "from json import loads",
            "from json import loads as parse",
            "from json.decoder import JSONDecoder",
            "import orjson",
            "from simplejson import loads",
            "decoder.raw_decode(text)",
        ],
    )
    def test_every_way_of_parsing_is_found(self, source: str) -> None:
        assert json_parsing(source)

    def test_dumping_is_not_parsing(self) -> None:
        assert json_parsing("import json\nfrom json import dumps\njson.dumps(x)") == []
