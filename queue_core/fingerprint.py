"""Failure fingerprints: which failed attempts share a cause.

Owns the normalization of an error message (``message_normalize``), the choice of the
handler's own top frame in a traceback (``top_frame``) and the digest of the three
(``fingerprint``). Two attempts that failed for the same reason, on different entries,
with different ids, counts or quoted values in their messages, get the same fingerprint;
attempts whose error types differ never do (the type is part of the digest).

Normalization rules (``message_normalize``), applied in this order:

1. Only the first ``NORMALIZE_CHARS`` (1,000) characters are read: a huge message costs
   the same as a short one, and two messages that differ only after that share a cause.
2. Quoted values (``'…'``, ``"…"`` or backticks, one line, at most 200 characters
   inside) become ``'<v>'``: a key name, a payload value, a path.
3. A URL's query string and fragment become ``?<v>``
   (``https://api.example/users?id=7&t=x`` -> ``https://api.example/users?<v>``):
   they name one request; the scheme, host and path say which service failed.
4. E-mail addresses become ``<v>`` (``550 mailbox unavailable: ann@example.invalid``):
   one address is one entity, not one cause.
5. UUIDs become ``<v>``.
6. IP addresses become ``<v>``, with their port: IPv4 (``10.0.0.7:5432``) and IPv6
   (``2001:db8::1``, ``[fe80::1]:443``; a run of hex groups and colons with at least
   two colons and a digit, so ``Foo::bar`` and ``12:30`` are left to the other rules).
7. Every word (ASCII letters, digits, ``_``) holding a digit becomes ``<v>``: numbers
   (``42``, each part of ``3.14``), stream ids (``1700000000000-0`` -> ``<v>-<v>``),
   ``0x`` hex, ``user1234``, ``v2``.
8. Every word of 8 or more hex digits becomes ``<v>`` (``deadbeef``, a SHA).
9. Runs of whitespace become one space; the ends are trimmed; the result is cut to
   ``NORMALIZED_CAP`` (300) characters.

``NORMALIZATION_VERSION`` names these rules. A change to them changes the fingerprints
of stored failures too: it comes with a data migration that re-fingerprints the rows
whose stored fingerprint differs (``dashboard.insight.failure_index.backfill``), so old and new
attempts of one cause keep sharing it.

The top frame (``top_frame``) is the innermost ``File "…", line N, in f`` of the
traceback's last exception whose file is not the standard library, an installed package
or ``queue_core`` itself: the handler's own code that raised, as ``dir/file.py:function``
(the last two path parts, so a different deploy directory is the same frame; no line
number, so a redeploy that moves the line is the same cause).

The fingerprint is a 16-hex-digit BLAKE2b digest of the error type, the normalized
message and the top frame. Pure: no I/O, never imports Django or Redis. Cost: a few
regular-expression passes over at most 1,000 characters of message and 8,000 of
traceback (a few microseconds for a typical failure).
"""

from __future__ import annotations

import hashlib
import re

#: Characters of a message that are normalized; the rest is ignored.
NORMALIZE_CHARS = 1000
#: Longest normalized message kept.
NORMALIZED_CAP = 300
#: Characters at the end of a traceback that are searched for the top frame.
TRACEBACK_TAIL = 8000
#: Hex digits in a fingerprint.
FINGERPRINT_LENGTH = 16
#: What a removed value becomes.
VALUE = "<v>"
#: The rules above: raised whenever a change to them changes some fingerprint.
NORMALIZATION_VERSION = 2

_QUOTED = re.compile(r"'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"|`[^`\n]{0,200}`")
# The query and fragment of a URL: scheme://, then no space, quote or bracket.
_URL_QUERY = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s?#'\"<>]*)[?#][^\s'\"<>]*")
_EMAIL = re.compile(
    r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)+",
    re.ASCII,
)
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?(?![\w.])", re.ASCII)
# Hex groups and colons, with "::" or seven colons; checked for a digit by _ipv6 (so
# C++-style names and plain words are not addresses). An optional [..]:port around it.
_IPV6 = re.compile(
    r"(?<![\w:])\[?(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?:\]:\d{1,5}|\])?(?![\w:])",
    re.ASCII,
)
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
# A word's non-digits, then a digit. ASCII classes: twice as fast as Unicode's, and a
# word is what a stream id, a number or a hex string is made of.
_VALUE_WORD = re.compile(r"\b(?:[0-9a-fA-F]{8,}\b|[A-Za-z_]*[0-9]\w*)", re.ASCII)
_SPACE = re.compile(r"\s+")
# A literal prefix, so the engine skips to each 'File "' instead of trying every position.
_FRAME = re.compile(r'File "([^"\n]*)", line \d+, in ([^\n]*)')
# Tracebacks of chained exceptions print each exception's frames in turn: the last
# section is the exception that was raised last.
_CHAIN = (
    "\nDuring handling of the above exception",
    "\nThe above exception was the direct cause",
)
#: Path parts that mark a frame as not the handler's own code.
_NOT_OWN = ("/site-packages/", "/dist-packages/", "/queue_core/", "/lib/python3", "\\lib\\")


def _ipv6(match: re.Match[str]) -> str:
    found = match.group(0)
    core = found.strip("[]").split("]:")[0]
    if ("::" in core or core.count(":") == 7) and any(c.isdigit() for c in core):
        return VALUE
    return found


def message_normalize(message: str) -> str:
    """``message`` with its values removed, per the module's rules 1-9. Pure."""
    text = message[:NORMALIZE_CHARS]
    text = _QUOTED.sub("'" + VALUE + "'", text)
    text = _URL_QUERY.sub(r"\1?" + VALUE, text)
    text = _EMAIL.sub(VALUE, text)
    text = _UUID.sub(VALUE, text)
    text = _IPV4.sub(VALUE, text)
    if "::" in text or text.count(":") >= 7:  # the IPv6 pass only where one may be
        text = _IPV6.sub(_ipv6, text)
    text = _VALUE_WORD.sub(VALUE, text)
    text = _SPACE.sub(" ", text).strip()
    return text[:NORMALIZED_CAP]


def _own(path: str) -> bool:
    if path.startswith("<"):  # <frozen runpy>, <string>
        return False
    normal = path.replace("\\", "/")
    return not any(part in normal for part in _NOT_OWN)


def _innermost_own(frames: list[tuple[str, str]]) -> tuple[str, str] | None:
    return next((f for f in reversed(frames) if _own(f[0])), None)


def top_frame(traceback: str | None) -> str:
    """The handler's own innermost frame as ``dir/file.py:function``; "" when none.

    Reads the last ``TRACEBACK_TAIL`` characters, and of a chained traceback only the
    last exception's frames. A traceback whose every frame is library code falls back
    to its innermost frame, so the fingerprint still tells the place apart.
    """
    if not traceback:
        return ""
    tail = traceback[-TRACEBACK_TAIL:]
    start = max(0, max(tail.rfind(marker) for marker in _CHAIN))
    # The innermost frames are last: look at the last 2,000 characters first, and at
    # the whole last section only when no own frame is there (the same answer, cheaper).
    near = max(start, len(tail) - 2000)
    found = _innermost_own(_FRAME.findall(tail, near))
    if found is None and near > start:
        found = _innermost_own(_FRAME.findall(tail, start))
    if found is None:
        frames = _FRAME.findall(tail, start) or _FRAME.findall(tail)
        if not frames:
            return ""
        found = frames[-1]
    path, function = found
    short = "/".join(path.replace("\\", "/").rsplit("/", 2)[-2:])
    return f"{short}:{function.strip()[:100]}"


def fingerprint(error_type: str, message: str, traceback: str | None = None) -> str:
    """The cause of one failed attempt: 16 hex digits over the error type, the normalized
    message and the top frame. Attempts that differ only in ids, numbers, hex strings or
    quoted values share it; attempts of different error types never do. Pure."""
    key = "\x1f".join((error_type, message_normalize(message), top_frame(traceback)))
    digest = hashlib.blake2b(key.encode("utf-8", "replace"), digest_size=FINGERPRINT_LENGTH // 2)
    return digest.hexdigest()
