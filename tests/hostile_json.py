"""Hypothesis strategies of hostile JSON text, shared by the entry-point tests.

``hostile_json()`` draws what a stranger with write access to Redis, a token or a URL
can send where JSON is expected: documents nested from just past the reader's bound to
a hundred thousand levels deep (arrays, objects, both, unclosed, inside a valid object
or in a JSON string, where brackets do not count), long numbers, broken escapes and
random bracket soup. Every one is either refused by ``queue_core.bounded_json`` or read
as what it is; none may reach a caller as anything but a ``ValueError``.
"""

from __future__ import annotations

from hypothesis import strategies as st

from queue_core.bounded_json import MAX_DEPTH

#: Depths that matter: at the bound, just past it, where Python's parser gave up (about
#: 1000 levels, less from inside a deep stack), and far past it.
DEPTHS = st.one_of(
    st.integers(min_value=MAX_DEPTH - 2, max_value=MAX_DEPTH + 2),
    st.sampled_from([500, 900, 999, 1000, 1001, 1500, 5000, 100_000]),
    st.integers(min_value=1, max_value=3000),
)
#: (opening, innermost, closing) of one level.
SHAPES = st.sampled_from(
    [
        ("[", "1", "]"),
        ('{"a":', "1", "}"),
        ('[{"k":', "null", "}]"),
        ('{"a":[', '"x"', "]}"),
        ("[", "", ""),  # unclosed
        ('{"a":', "", ""),
        ("[", '"]]]', "]"),  # a string holding closing brackets
        ('["\\"",', "0", "]"),  # an escaped quote inside a string at each level
    ]
)
#: How a deep document is carried.
CARRIERS = st.sampled_from(
    [
        "%s",
        '{"stream": "s", "group": "g", "id": "1-1", "reason": %s}',
        '{"ids": [%s], "names": ["a"]}',
        '{"type": "failure", "stream": "s", "at": %s}',
        '"%s"',  # inside a JSON string: brackets there are text, and may be fine
        "[1, 2, %s",
    ]
)
SOUP = st.text(alphabet='[]{}",:\\ 0a-e', max_size=300)
NUMBERS = st.sampled_from(
    ["1" * 5000, "-" + "9" * 4400, "1e999", "-1e400", "1" * 300 + ".5e10", "Infinity", "NaN"]
)


@st.composite
def deep_documents(draw: st.DrawFn) -> str:
    opening, inner, closing = draw(SHAPES)
    depth = draw(DEPTHS)
    document = opening * depth + inner + closing * depth
    carrier = draw(CARRIERS)
    if carrier == '"%s"':
        document = document.replace("\\", "\\\\").replace('"', '\\"')
    return carrier.replace("%s", document)


def hostile_json() -> st.SearchStrategy[str]:
    """Hostile JSON text: mostly deep documents, some soup and numbers."""
    return st.one_of(deep_documents(), deep_documents(), SOUP, NUMBERS)
