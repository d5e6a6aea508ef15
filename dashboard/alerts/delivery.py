"""What an alert says and how it is posted: the two webhook shapes and one HTTP POST.

Owns the generic JSON body (rule, severity, stream, group, value, threshold, summary, a
link to the page), the Slack-compatible ``{"text": …}`` (its ``&``, ``<`` and ``>``
escaped as Slack asks, so a stream name cannot forge a link or a mention) and
``webhook_post``: one POST with the standard library, a timeout
(``ACKBOARD_ALERTS_TIMEOUT_S``), and an answer instead of an exception whatever the
receiver does. Never reads Redis or the database; the caller logs and retries.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.urls import reverse

from dashboard.alerts.rules import AlertRule, Breach

#: Most bytes of a receiver's answer kept for the log and the test button's message.
ANSWER_BYTES = 200
USER_AGENT = "Ackboard-alerts/1"


#: What the test button sends: a rule of its own, so no receiver mistakes it for a breach.
TEST_RULE = AlertRule(
    "AckboardTestAlert", "info", 0, 0, 0,
    "A test alert from Ackboard: this webhook receives its alerts.",
    lambda rule, readings, now_s: {},
)  # fmt: skip
TEST_BREACH = Breach(TEST_RULE, "", "", 0.0)


def page_link(stream: str, group: str) -> str:
    """The group's page (the stream's when no group; the overview for the deployment),
    absolute when ``ACKBOARD_ALERTS_BASE_URL`` is set."""
    if stream and group:
        path = reverse("dashboard:group-detail", kwargs={"stream": stream, "group": group})
    elif stream:
        path = reverse("dashboard:stream-detail", kwargs={"stream": stream})
    else:
        path = reverse("dashboard:overview")
    base = str(settings.ACKBOARD_ALERTS_BASE_URL).rstrip("/")
    return base + path


def generic_body(breach: Breach, *, test: bool = False) -> dict[str, Any]:
    """The generic webhook's JSON object."""
    return {
        "source": "ackboard",
        "test": test,
        "rule": breach.rule.name,
        "severity": breach.rule.severity,
        "stream": breach.stream,
        "group": breach.group,
        "value": breach.value,
        "threshold": breach.rule.threshold,
        "for_s": breach.rule.for_s,
        "summary": breach.summary,
        "link": page_link(breach.stream, breach.group),
    }


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(breach: Breach, *, test: bool = False) -> dict[str, Any]:
    """The Slack-compatible webhook's ``{"text": …}``: the rule, the summary, the link."""
    head = "[test] " if test else ""
    text = (
        f"{head}*{breach.rule.name}* ({breach.rule.severity}): "
        f"{_slack_escape(breach.summary)} <{_slack_escape(page_link(breach.stream, breach.group))}"
        "|Open in Ackboard>"
    )
    return {"text": text}


def body_for(kind: str, breach: Breach, *, test: bool = False) -> dict[str, Any]:
    return slack_body(breach, test=test) if kind == "slack" else generic_body(breach, test=test)


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """A POST's outcome: ``status`` the HTTP status (None when none came back)."""

    ok: bool
    status: int | None
    detail: str

    @property
    def text(self) -> str:
        code = f"HTTP {self.status}" if self.status is not None else "no answer"
        return f"{code}: {self.detail}" if self.detail else code


def webhook_post(
    url: str, body: dict[str, Any], *, timeout_s: float | None = None
) -> WebhookDelivery:
    """POST ``body`` as JSON to ``url``; ok on a 2xx. Never raises for the receiver's sake
    (refused, timed out, a 5xx, a bad URL): the answer says what happened."""
    timeout = timeout_s if timeout_s is not None else float(settings.ACKBOARD_ALERTS_TIMEOUT_S)
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": USER_AGENT},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 # http(s) only, validated
            text = answer.read(ANSWER_BYTES).decode("utf-8", "replace")
            return WebhookDelivery(200 <= answer.status < 300, answer.status, text.strip())
    except urllib.error.HTTPError as exc:
        text = exc.read(ANSWER_BYTES).decode("utf-8", "replace") if exc.fp else ""
        return WebhookDelivery(False, exc.code, text.strip() or str(exc.reason))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return WebhookDelivery(False, None, f"{type(exc).__name__}: {reason}")
