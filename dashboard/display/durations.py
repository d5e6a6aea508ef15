"""How the pages write a duration, and the instant an idle time started.

``human_ms`` is the one way a duration reads ("3 min 20 s"), in a page, a verdict's
reason or the CLI; ``since_ms`` the instant a page writes for "idle for this long at
that time". Pure: no Redis, SQL or request.
"""

from __future__ import annotations

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000))


def human_ms(ms: int | float | None) -> str:
    """``200000`` -> ``3 min 20 s``: the two largest units, or ms below one second."""
    if ms is None:
        return "—"
    ms = int(ms)
    if ms < 0:
        return "-" + human_ms(-ms)
    if ms < 1_000:
        return f"{ms} ms"
    for i, (unit, size) in enumerate(_UNITS):
        if ms >= size:
            big, rest = divmod(ms, size)
            text = f"{big} {unit}"
            if i + 1 < len(_UNITS):
                next_unit, next_size = _UNITS[i + 1]
                if small := rest // next_size:
                    text += f" {small} {next_unit}"
            return text
    return f"{ms} ms"  # unreachable: ms >= 1000 matches "s"


def since_ms(idle_ms: int | float, now_ms: int) -> int:
    """The instant an idle time started, rounded up to the second: what ``since_span``
    shows for "idle for ``idle_ms`` at ``now_ms``". Rounding keeps the instant the same
    from one read to the next (so is the HTML), and up, so the idle time the browser
    derives from it is never more than the true one (a claim posts it as its guard)."""
    return -(-(int(now_ms) - int(idle_ms)) // 1000) * 1000
