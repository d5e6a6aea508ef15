"""Trace ids (W3C Trace Context) for failure records and the dashboard's trace links.

A trace id is 32 lowercase hex digits, not all zero. It comes from a ``traceparent``
value (``00-<trace id>-<span id>-<flags>``), from a bare trace id, or from the current
OpenTelemetry span when ``opentelemetry-api`` is installed (it is optional: without it,
or outside a span, there is no trace id).
"""

from __future__ import annotations

import functools
import re
from typing import Any

_TRACEPARENT = re.compile(r"\A[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}\Z")
_TRACE_ID = re.compile(r"\A[0-9a-f]{32}\Z")
_NO_TRACE = "0" * 32


def trace_id_parse(value: str | bytes | None) -> str:
    """The trace id in ``value`` (a ``traceparent`` or a bare trace id), or ``""``: a
    value of any other shape is no trace id, never an error."""
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="replace")
    if not value or len(value) > 64:
        return ""
    value = value.strip().lower()
    match = _TRACEPARENT.match(value) or _TRACE_ID.match(value)
    if match is None:
        return ""
    trace_id = match.group(1) if match.re is _TRACEPARENT else match.group(0)
    return "" if trace_id == _NO_TRACE else trace_id


@functools.cache
def _opentelemetry_trace() -> Any:
    """``opentelemetry.trace``, or None when it is not installed (asked once: a failed
    import is not cached by Python and would search the path on every failure)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


def current_trace_id() -> str:
    """The current OpenTelemetry span's trace id, or ``""`` (no library, no span)."""
    trace = _opentelemetry_trace()
    if trace is None:
        return ""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""
