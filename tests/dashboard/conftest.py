"""Fixtures of the action tests (test_actions.py, test_bulk.py): operators with chosen
permissions, and the settings the actions read. Neither is autouse: a module asks with
``pytest.mark.usefixtures("action_settings")``. The CLI and API tests (test_cli.py,
test_api.py) ask for ``remote_world`` (seeded Redis, its settings) and ``olga``/``rita``."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.test import Client
from pytest_django.fixtures import Settings as SettingsWrapper

from tests.dashboard.action_helpers import MakeClient
from tests.dashboard.remote_helpers import World, seed
from tests.factories import make_user
from tests.migration_data import migration_data_restore

#: What an operator holds: reading and every action.
ALL_ACTIONS = (
    "view_queues",
    "retry_entry",
    "claim_entry",
    "dead_letter_entry",
    "acknowledge_entry",
    "replay_entry",
    "delete_dead_letter",
)


@pytest.fixture
def action_settings(settings: SettingsWrapper, redis_url: str) -> None:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_RETRY_IDLE_MS = 60_000
    settings.ACKBOARD_OPERATOR_CONSUMER = "ackboard-operator"


@pytest.fixture
def page_settings(settings: SettingsWrapper, redis_url: str, prefix: str) -> SettingsWrapper:
    """Pages on the private Redis that list only this test's streams."""
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    return settings


@pytest.fixture
def viewer(client: Client, django_user_model: type[User]) -> Client:
    """A client logged in as a read-only user (``view_queues`` only)."""
    client.force_login(make_user(django_user_model, "viewer", "view_queues"))
    return client


@pytest.fixture
def make_client(django_user_model: type[User]) -> MakeClient:
    def make(name: str = "olga", *codenames: str, **client_kwargs: bool) -> Client:
        user = make_user(django_user_model, name, *(codenames or ALL_ACTIONS))
        client = Client(**client_kwargs)
        client.force_login(user)
        return client

    return make


# --- the CLI and API tests (test_cli.py, test_api.py) ----------------------------------


@pytest.fixture
def remote_settings(settings: SettingsWrapper, redis_url: str, prefix: str) -> None:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_REDIS_TIMEOUT = 0.5
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_RETRY_IDLE_MS = 60_000
    settings.ACKBOARD_OPERATOR_CONSUMER = "ackboard-operator"


@pytest.fixture
def remote_world(r: redis.Redis, stream: str, remote_settings: None) -> World:
    """A seeded world for the CLI and API tests (remote_helpers.seed), their settings set."""
    return seed(r, stream)


@pytest.fixture
def olga(django_user_model: Any) -> Any:
    """An operator: every action's permission."""
    return make_user(django_user_model, "olga", *ALL_ACTIONS)


@pytest.fixture
def rita(django_user_model: Any) -> Any:
    """A reader: view_queues only."""
    return make_user(django_user_model, "rita", "view_queues")


@pytest.fixture
def migration_data(db: None) -> None:
    """The role groups the migrations ship, run again if another file's flush took them
    (tests/migration_data.py)."""
    migration_data_restore()
