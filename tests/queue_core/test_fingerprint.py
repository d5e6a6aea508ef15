"""queue_core.fingerprint: the normalization rules, the top frame, and the digest's
promises (attempts differing only in ids or numbers share a fingerprint; different error
types never do), with a property test over generated messages."""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_core.fingerprint import (
    FINGERPRINT_LENGTH,
    NORMALIZED_CAP,
    fingerprint,
    message_normalize,
    top_frame,
)

TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/.venv/lib/python3.12/site-packages/queue_core/worker/loop.py", line 88, in _handle
    result = handler(entry)
  File "/srv/releases/41/handlers/email.py", line 12, in send
    smtp.deliver(to)
  File "/srv/releases/41/handlers/smtp.py", line 40, in deliver
    raise ConnectionError(f"smtp {host} refused")
  File "/usr/lib/python3.12/socket.py", line 851, in create_connection
    raise err
ConnectionError: smtp 10.0.0.7 refused
"""


@pytest.mark.parametrize(
    ("message", "normalized"),
    [
        ("order 1234 not found", "order <v> not found"),
        ("took 3.25 s", "took <v>.<v> s"),
        ("entry 1700000000000-12 is stuck", "entry <v>-<v> is stuck"),
        (f"user {uuid.UUID(int=7)} has no email", "user <v> has no email"),
        ("digest deadbeefcafe mismatch at 0xff10", "digest <v> mismatch at <v>"),
        ("KeyError: 'customer_id'", "KeyError: '<v>'"),
        ('missing field "to" in payload', "missing field '<v>' in payload"),
        ("  many   spaces\n\tand lines ", "many spaces and lines"),
        ("user1234 and v2 api", "<v> and <v> api"),
        ("no values here", "no values here"),
        ("face cafe bead", "face cafe bead"),  # short hex-looking words are words
        ("550 mailbox unavailable: X@example.invalid", "<v> mailbox unavailable: <v>"),
        ("to ann.lee+bills@mail.example.co.uk failed", "to <v> failed"),
        (
            "GET https://api.example/users?id=7&t=ab failed",
            "GET https://api.example/users?<v> failed",
        ),
        ("see http://docs.example/page#section", "see http://docs.example/page?<v>"),
        ("connect 10.0.0.7:5432 refused", "connect <v> refused"),
        ("connect to 2001:db8::1 refused", "connect to <v> refused"),
        ("reset by [fe80::1]:443", "reset by <v>"),
        ("std::vector and Foo::bar", "std::vector and Foo::bar"),  # names, not addresses
    ],
)
def test_message_normalize_rules(message: str, normalized: str) -> None:
    assert message_normalize(message) == normalized


@pytest.mark.parametrize(
    "template",
    [
        "550 mailbox unavailable: {}",
        "webhook https://hooks.example/in?{} returned 500",
        "connection to {} timed out",
    ],
)
def test_per_entity_values_make_one_cause(template: str) -> None:
    # One failing mailbox server, webhook or host: one cause, whatever the entity.
    values = {
        "550 mailbox unavailable: {}": [
            "X@example.invalid",
            "ann@example.invalid",
            "b.c@d.example",
        ],
        "webhook https://hooks.example/in?{} returned 500": ["u=ann", "u=bob&sig=Zz", "k=v"],
        "connection to {} timed out": ["10.0.0.7", "192.168.1.20:6379", "2001:db8::17"],
    }[template]
    assert len({fingerprint("SMTPError", template.format(v)) for v in values}) == 1


def test_normalize_is_bounded_on_huge_messages() -> None:
    huge = "x" * 5_000_000 + " 42"
    started = time.perf_counter()
    out = message_normalize(huge)
    assert time.perf_counter() - started < 0.05
    assert len(out) == NORMALIZED_CAP
    # Only the first 1,000 characters are read: a tail difference is the same cause.
    assert fingerprint("E", "x" * 1000 + " 1") == fingerprint("E", "x" * 1000 + " 2 other")
    assert fingerprint("E", "x" * 1000) != fingerprint("E", "y" * 1000)


def test_top_frame_is_the_handlers_own_innermost() -> None:
    assert top_frame(TRACEBACK) == "handlers/smtp.py:deliver"
    assert top_frame("") == ""
    assert top_frame(None) == ""
    assert top_frame("not a traceback at all") == ""


def test_top_frame_of_a_chain_is_the_last_exception() -> None:
    chained = (
        TRACEBACK
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + 'Traceback (most recent call last):\n  File "/app/handlers/retry.py", line 3, in wrap\n'
        + "    raise RuntimeError('x')\nRuntimeError: x\n"
    )
    assert top_frame(chained) == "handlers/retry.py:wrap"


def test_top_frame_only_library_code_falls_back_to_innermost() -> None:
    tb = (
        'Traceback (most recent call last):\n  File "/usr/lib/python3.12/json/decoder.py", '
        "line 337, in decode\n    obj = x\njson.decoder.JSONDecodeError: bad\n"
    )
    assert top_frame(tb) == "json/decoder.py:decode"


def test_fingerprint_shape_and_parts() -> None:
    fp = fingerprint("ConnectionError", "smtp 10.0.0.7 refused", TRACEBACK)
    assert len(fp) == FINGERPRINT_LENGTH and int(fp, 16) >= 0
    assert fp == fingerprint("ConnectionError", "smtp 10.0.0.9 refused", TRACEBACK)
    # The redeploy moved the code (another directory, another line): the same cause.
    moved = TRACEBACK.replace("releases/41", "releases/42").replace("line 40", "line 44")
    assert fp == fingerprint("ConnectionError", "smtp 10.0.0.7 refused", moved)
    # Another type, another message, another frame: another cause.
    assert fp != fingerprint("TimeoutError", "smtp 10.0.0.7 refused", TRACEBACK)
    assert fp != fingerprint("ConnectionError", "smtp refused", TRACEBACK)
    other_frame = TRACEBACK.replace("in deliver", "in connect")
    assert fp != fingerprint("ConnectionError", "smtp 10.0.0.7 refused", other_frame)


# --- properties ------------------------------------------------------------------------

#: Template words: letters and punctuation, never a digit or a quote (values are slots).
_WORD = st.text(
    alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyzABCXYZ:=;,()[]/_!?"),
    min_size=1,
    max_size=12,
)
_KINDS = ("int", "stream_id", "uuid", "hex", "quoted", "float")


def _value(kind: str) -> st.SearchStrategy[str]:
    if kind == "int":
        return st.integers(min_value=0, max_value=10**18).map(str)
    if kind == "stream_id":
        return st.tuples(st.integers(0, 2**48), st.integers(0, 2**32)).map(
            lambda t: f"{t[0]}-{t[1]}"
        )
    if kind == "uuid":
        return st.uuids().map(str)
    if kind == "hex":
        return st.binary(min_size=4, max_size=32).map(bytes.hex)
    if kind == "float":
        return st.floats(min_value=0, max_value=1e9, allow_nan=False).map(lambda f: f"{f:.3f}")
    inner = st.text(
        alphabet=st.characters(blacklist_characters="'\n\r", blacklist_categories=("Cs",)),
        max_size=60,
    )
    return inner.map(lambda s: f"'{s}'")


@st.composite
def _two_attempts(draw: st.DrawFn) -> tuple[str, str]:
    """Two messages from one template whose slots hold different values of one kind each."""
    parts = draw(
        st.lists(st.one_of(_WORD, st.sampled_from(_KINDS).map(lambda k: "$" + k)), max_size=12)
    )
    first, second = [], []
    for part in parts:
        if part.startswith("$"):
            first.append(draw(_value(part[1:])))
            second.append(draw(_value(part[1:])))
        else:
            first.append(part)
            second.append(part)
    return " ".join(first), " ".join(second)


@settings(max_examples=300, deadline=None)
@given(pair=_two_attempts(), error_type=st.sampled_from(["KeyError", "TimeoutError", "E"]))
def test_attempts_differing_only_in_values_share_a_fingerprint(
    pair: tuple[str, str], error_type: str
) -> None:
    one, two = pair
    assert message_normalize(one) == message_normalize(two)
    assert fingerprint(error_type, one, TRACEBACK) == fingerprint(error_type, two, TRACEBACK)


@settings(max_examples=200, deadline=None)
@given(
    a=st.text(min_size=1, max_size=40),
    b=st.text(min_size=1, max_size=40),
    message=st.text(max_size=200),
)
def test_different_error_types_never_share_a_fingerprint(a: str, b: str, message: str) -> None:
    if a == b:
        assert fingerprint(a, message) == fingerprint(b, message)
    else:
        assert fingerprint(a, message, TRACEBACK) != fingerprint(b, message, TRACEBACK)
