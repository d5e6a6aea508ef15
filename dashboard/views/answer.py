"""A terminal's or a script's answer: what ``manage.py ackboard`` prints and the JSON API
returns, for an action, its dry run or a refusal.

Owns ``Answer`` (an HTTP status and a JSON-able payload whose ``message`` is the one line
a terminal prints) and ``refusal``. It lives apart from ``dashboard.views.remote`` so that
an action's declaration (``dashboard.views.action_table.Action.remote_dry_run``) can name
the answer its dry run gives without importing the runner. Pure data: no Redis, no SQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    """One answer: the HTTP status (the CLI maps it to an exit status) and the JSON body.
    ``payload["message"]`` is the one line a terminal prints."""

    status: int
    payload: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def line(self) -> str:
        return str(self.payload["message"])


def refusal(status: int, message: str, **extra: Any) -> Answer:
    """An answer that did nothing: bad input, no token, unknown, refused, Redis down."""
    result = "error" if status >= 500 else "refused"
    return Answer(status, {"ok": False, "result": result, "message": message, **extra})
