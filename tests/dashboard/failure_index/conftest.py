"""Fixtures of the failure-index tests."""

from __future__ import annotations

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper


@pytest.fixture
def ingest_allowlist(settings: SettingsWrapper, redis_url: str, prefix: str) -> None:
    """Point the ingestor at the private server and allow only this test's streams (the
    ingestor scans the whole server)."""
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
