"""Fleet control (issue 12): Pause, Resume, Retire, Retire idle consumers.

Filled in by the fleet-control work; ``ROWS`` are its rows of
``dashboard.views.actions.ACTIONS`` and ``PATTERNS`` its own routes.
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

from dashboard.views.action_table import Action

ROWS: tuple[Action, ...] = ()
PATTERNS: list[URLPattern | URLResolver] = []
