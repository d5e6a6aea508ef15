"""Fixtures of the action tests (test_actions.py, test_bulk.py): operators with chosen
permissions, and the settings the actions read. Neither is autouse: a module asks with
``pytest.mark.usefixtures("action_settings")``."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django.fixtures import Settings as SettingsWrapper

from tests.dashboard.action_helpers import MakeClient
from tests.factories import make_user

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
def make_client(django_user_model: type[User]) -> MakeClient:
    def make(name: str = "olga", *codenames: str, **client_kwargs: bool) -> Client:
        user = make_user(django_user_model, name, *(codenames or ALL_ACTIONS))
        client = Client(**client_kwargs)
        client.force_login(user)
        return client

    return make
