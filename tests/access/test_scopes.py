"""Permissions by stream: a role's patterns decide which streams its permissions reach,
on every page, list, push, export and action; a role with no pattern reaches every stream.

Against the private Redis and the test database, through Django's client (and the live
layer's own functions for pushes). The property test draws users, roles and patterns."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.access.api_tokens import token_issue
from dashboard.access.scopes import (
    VIEW_QUEUES,
    Access,
    access_of,
    pattern_check,
    pattern_regex,
    reach_q,
)
from dashboard.insight.failure_index import failures_ingest
from dashboard.live.consumers import surface_scoped
from dashboard.live.registry import Surface, surface_context
from dashboard.models import AuditEvent, IndexedFailure, StreamScope
from dashboard.runtime.connection import get_redis
from tests.factories import add_failure, make_pending

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


# --- the pattern language ----------------------------------------------------------------

NAME_CHARS = st.sampled_from(list("ab:.*?[]%_\\\n é"))


def _glob(pattern: str, name: str) -> bool:
    """The rule by definition: ``*`` any run, ``?`` one character, the rest literal."""
    if not pattern:
        return not name
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        return any(_glob(rest, name[i:]) for i in range(len(name) + 1))
    if not name:
        return False
    return (head == "?" or head == name[0]) and _glob(rest, name[1:])


@given(pattern=st.text(NAME_CHARS, max_size=6), name=st.text(NAME_CHARS, max_size=6))
@hsettings(max_examples=300, deadline=None)
def test_a_pattern_matches_by_its_definition(pattern: str, name: str) -> None:
    assert bool(re.match(pattern_regex(pattern), name)) is _glob(pattern, name)


@given(
    patterns=st.lists(st.text(NAME_CHARS, min_size=1, max_size=5), min_size=1, max_size=3),
    names=st.lists(st.text(NAME_CHARS, min_size=1, max_size=6), min_size=1, max_size=8),
)
@hsettings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_sql_and_python_agree_on_a_reach(patterns: list[str], names: list[str]) -> None:
    """The failure index and the audit filter in SQL what the overview filters in memory."""
    IndexedFailure.objects.all().delete()
    for i, name in enumerate(dict.fromkeys(names)):
        IndexedFailure.objects.create(
            failures_key=f"k{i}", source_id=f"{i}-0", stream=name, group="g",
            entry_id="1-0", attempt=1, error_type="E", message="m",
            failed_at="2026-01-01T00:00:00Z",
        )  # fmt: skip
    where = reach_q(tuple(patterns))
    assert where is not None
    in_sql = set(IndexedFailure.objects.filter(where).values_list("stream", flat=True))
    in_python = {
        n for n in names if Access(frozenset(f"{VIEW_QUEUES}@{p}" for p in patterns)).reads(n)
    }
    assert in_sql == in_python


def test_a_pattern_is_checked_before_it_is_stored() -> None:
    assert pattern_check("orders:*") == "orders:*"
    for bad in ("", "a\nb", "x" * 1025):
        with pytest.raises(ValueError, match="pattern"):
            pattern_check(bad)


# --- a world of three streams ------------------------------------------------------------


@dataclass
class World:
    streams: dict[str, str]  # short name -> stream name
    entries: dict[str, str]  # short name -> a pending entry id of group "g"

    def name(self, short: str) -> str:
        return self.streams[short]


SHORT = ("orders:a", "orders:b", "billing:x")


@pytest.fixture
def world(r: redis.Redis, prefix: str, settings: SettingsWrapper, redis_url: str) -> World:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_RETRY_IDLE_MS = 60_000
    settings.ACKBOARD_OPERATOR_CONSUMER = "ackboard-operator"
    streams = {s: prefix + s for s in SHORT}
    entries = {}
    for short, stream in streams.items():
        [entries[short]] = make_pending(r, stream, "g", "c1", 1)
        add_failure(r, stream, entries[short], group="g", message=f"boom in {short}")
    assert failures_ingest(client=r) == len(SHORT)
    return World(streams, entries)


def role(name: str, codenames: tuple[str, ...], patterns: tuple[str, ...] = ()) -> Group:
    group = Group.objects.create(name=name)
    perms = Permission.objects.filter(content_type__app_label="dashboard", codename__in=codenames)
    group.permissions.add(*perms)
    for p in patterns:
        StreamScope.objects.create(group=group, pattern=p)
    return group


def member(django_user_model: type[User], name: str, *groups: Group) -> User:
    user = django_user_model.objects.create_user(username=name, password="pw")
    user.groups.add(*groups)
    return user


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def overview_names(client: Client) -> set[str]:
    response = client.get(reverse("dashboard:overview"))
    assert response.status_code == 200
    return {row.name for row in response.context["rows"]}


def failure_streams(client: Client) -> set[str]:
    response = client.get(reverse("dashboard:failure-search"))
    assert response.status_code == 200
    return {row.failure.stream for row in response.context["rows"]}


def cause_streams(client: Client) -> set[str]:
    response = client.get(reverse("dashboard:failure-search"), {"view": "causes"})
    assert response.status_code == 200
    return {g.stream for row in response.context["cause_rows"] for g in row.groups}


def audit_streams(client: Client) -> set[str]:
    response = client.get(reverse("dashboard:audit-csv"))
    assert response.status_code == 200
    text = response.getvalue().decode()
    return {row["stream"] for row in csv.DictReader(io.StringIO(text))}


def metric_streams(client: Client) -> set[str]:
    response = client.get(reverse("dashboard:metrics"))
    assert response.status_code == 200
    found = re.findall(
        r'^ackboard_stream_length\{stream="([^"]*)"\}', response.content.decode(), re.M
    )
    return set(found)


def retry(client: Client, world: World, short: str) -> int:
    url = reverse(
        "dashboard:entry-action", args=[world.name(short), "g", world.entries[short], "retry"]
    )
    response = client.post(url, {"reason": "scoped", "seen_idle_ms": "0"}, headers=HTMX)
    return response.status_code


def overview_push_names(user: User) -> set[str]:
    """What a live overview socket of ``user`` is pushed: the surface it attaches to,
    rendered from its context (``dashboard.live``)."""
    scoped = surface_scoped(Surface("overview"), access_of(user).grants)
    assert scoped is not None
    context = surface_context(surface=scoped[0], client=get_redis())
    return {row.name for row in context["rows"]}


# --- the rules, one by one -----------------------------------------------------------------


def test_a_role_without_patterns_reaches_every_stream(
    world: World, django_user_model: type[User]
) -> None:
    """Deployments that configure no scope keep working unchanged."""
    reader = member(django_user_model, "reader", role("readers", ("view_queues", "retry_entry")))
    client = logged_in(reader)
    every = set(world.streams.values())
    assert overview_names(client) == every
    assert failure_streams(client) == every
    for short in SHORT:
        assert (
            client.get(reverse("dashboard:stream-detail", args=[world.name(short)])).status_code
            == 200
        )
    assert retry(client, world, "billing:x") == 200


def test_a_scoped_reader_sees_only_its_streams_everywhere(
    world: World, django_user_model: type[User], prefix: str
) -> None:
    team = role("orders team", ("view_queues", "retry_entry"), (prefix + "orders:*",))
    user = member(django_user_model, "ola", team)
    client = logged_in(user)
    mine = {world.name("orders:a"), world.name("orders:b")}
    billing = world.name("billing:x")
    AuditEvent.objects.create(username="x", action="retry", stream=billing, result="ok")
    AuditEvent.objects.create(
        username="x", action="retry", stream=world.name("orders:a"), result="ok"
    )

    page = client.get(reverse("dashboard:overview"))
    assert {row.name for row in page.context["rows"]} == mine
    assert billing not in page.content.decode()
    assert failure_streams(client) == mine
    assert cause_streams(client) == mine
    assert audit_streams(client) == {world.name("orders:a")}
    assert metric_streams(client) == mine
    assert overview_push_names(user) == mine
    # Every page of the billing stream answers as for a stream that does not exist.
    for url in (
        reverse("dashboard:stream-detail", args=[billing]),
        reverse("dashboard:group-detail", args=[billing, "g"]),
        reverse("dashboard:entry-detail", args=[billing, world.entries["billing:x"]]),
        reverse("dashboard:dlq", args=[billing]),
        reverse("dashboard:payload-find", args=[billing]) + "?q=boom",
    ):
        response = client.get(url)
        assert response.status_code == 404, url
        assert billing.encode() not in response.content
    assert (
        client.get(
            reverse("dashboard:group-detail", args=[world.name("orders:a"), "g"])
        ).status_code
        == 200
    )
    # A live socket on the billing stream is refused like one on a stream that is gone.
    grants = access_of(user).grants
    assert surface_scoped(Surface("stream", stream=billing), grants) is None
    orders_surface = surface_scoped(Surface("stream", stream=world.name("orders:a")), grants)
    assert orders_surface is not None and "dashboard.retry_entry" in orders_surface[1]


def test_the_overviews_counts_are_of_the_users_streams(
    world: World, django_user_model: type[User], prefix: str, settings: SettingsWrapper
) -> None:
    """Its totals count only the streams a scoped user reads, and it gives no count of
    companion streams (the index counts those for every stream, not per stream)."""
    settings.ACKBOARD_STREAMS = (prefix + "*", "{" + prefix + "*")  # the failure logs too
    team = role("orders counters", ("view_queues",), (prefix + "orders:*",))
    everyone = role("all counters", ("view_queues",))
    scoped = logged_in(member(django_user_model, "sam", team)).get(reverse("dashboard:overview"))
    unscoped = logged_in(member(django_user_model, "una", everyone)).get(
        reverse("dashboard:overview")
    )
    assert (scoped.context["page"].total, unscoped.context["page"].total) == (2, 3)
    assert (scoped.context["companions"], unscoped.context["companions"]) == (0, 3)
    assert "companion stream" not in scoped.content.decode()
    assert "3 companion streams" in unscoped.content.decode()


def test_an_action_outside_the_patterns_is_refused_and_audited(
    world: World, django_user_model: type[User], r: redis.Redis, prefix: str
) -> None:
    team = role("orders ops", ("view_queues", "retry_entry"), (prefix + "orders:*",))
    client = logged_in(member(django_user_model, "otto", team))
    billing = world.name("billing:x")

    def pel() -> list[tuple[bytes, bytes, int, bool]]:
        rows = r.xpending_range(billing, "g", min="-", max="+", count=10)
        # A Retry would add ACKBOARD_RETRY_IDLE_MS (60 s) to the idle time at once.
        return [
            (
                x["message_id"],
                x["consumer"],
                x["times_delivered"],
                x["time_since_delivered"] > 30_000,
            )
            for x in rows
        ]

    before = pel()
    assert retry(client, world, "billing:x") == 403
    assert pel() == before
    refused = AuditEvent.objects.get(stream=billing, action="retry")
    assert (refused.result, refused.username) == ("refused", "otto")

    assert retry(client, world, "orders:a") == 200
    done = AuditEvent.objects.get(stream=world.name("orders:a"), action="retry")
    assert done.result == "ok"


def test_the_buttons_on_a_stream_page_are_those_that_reach_it(
    world: World, django_user_model: type[User], prefix: str
) -> None:
    """Two roles: reading everywhere, retrying on orders only."""
    readers = role("all readers", ("view_queues",))
    retriers = role("orders retriers", ("retry_entry",), (prefix + "orders:*",))
    client = logged_in(member(django_user_model, "rue", readers, retriers))
    orders = client.get(reverse("dashboard:group-detail", args=[world.name("orders:a"), "g"]))
    billing = client.get(reverse("dashboard:group-detail", args=[world.name("billing:x"), "g"]))
    assert orders.status_code == billing.status_code == 200
    assert orders.context["perms"]["dashboard"]["retry_entry"]
    assert not billing.context["perms"]["dashboard"]["retry_entry"]
    assert b'id="row-retry"' in orders.content
    assert b'id="row-retry"' not in billing.content


def test_the_api_checks_the_stream_of_every_request(
    world: World, django_user_model: type[User], prefix: str
) -> None:
    team = role("orders api", ("view_queues", "retry_entry"), (prefix + "orders:*",))
    user = member(django_user_model, "api-user", team)
    _, token = token_issue(user=user, name="tests")
    client = Client(headers={"Authorization": f"Bearer {token}"})

    def post(short: str) -> int:
        body = {
            "stream": world.name(short),
            "group": "g",
            "id": world.entries[short],
            "reason": "api",
        }
        response = client.post(
            reverse("dashboard:api-action", args=["retry"]),
            json.dumps(body),
            content_type="application/json",
        )
        return response.status_code

    assert post("billing:x") == 403
    assert post("orders:b") == 200
    results = dict(AuditEvent.objects.filter(channel="api").values_list("stream", "result"))
    assert results == {world.name("billing:x"): "refused", world.name("orders:b"): "ok"}


def test_a_bulk_step_outside_the_patterns_is_refused(
    world: World, django_user_model: type[User], r: redis.Redis, prefix: str
) -> None:
    team = role("orders bulk", ("view_queues", "acknowledge_entry"), (prefix + "orders:*",))
    client = logged_in(member(django_user_model, "bo", team))
    billing = world.name("billing:x")
    url = reverse("dashboard:bulk-action", args=[billing, "g", "acknowledge"])
    response = client.post(
        url,
        {"ids": [world.entries["billing:x"]], "confirm": "1", "reason": "x", "scope": "ids"},
        headers=HTMX,
    )
    assert response.status_code == 403
    assert r.xpending(billing, "g")["pending"] == 1
    assert AuditEvent.objects.get(stream=billing).result == "refused"


# --- the property: no leak, no unauthorised action -------------------------------------------

PERM_SETS = st.sets(st.sampled_from(["view_queues", "retry_entry"]), min_size=1)
PATTERN_POOL = ("orders:*", "orders:a", "billing:?", "*", "b*", "nothing:*")


@st.composite
def roles(draw: Any) -> list[tuple[frozenset[str], tuple[str, ...]]]:
    """One to three roles, each a permission set and its patterns (none: everywhere)."""
    drawn: list[tuple[frozenset[str], tuple[str, ...]]] = draw(
        st.lists(
            st.tuples(
                PERM_SETS.map(frozenset),
                st.lists(st.sampled_from(PATTERN_POOL), max_size=2, unique=True).map(tuple),
            ),
            min_size=1,
            max_size=3,
        )
    )
    return drawn


def _expected(
    drawn: list[tuple[frozenset[str], tuple[str, ...]]], short: str, codename: str
) -> bool:
    """The rule by definition, with ``_glob``, not the code under test."""
    return any(
        codename in perms and (not patterns or any(_glob(p, short) for p in patterns))
        for perms, patterns in drawn
    )


@pytest.fixture
def fresh_users() -> Iterator[None]:
    yield
    User.objects.filter(username__startswith="drawn").delete()
    Group.objects.filter(name__startswith="drawn").delete()


@given(drawn=roles())
@hsettings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_page_push_export_or_action_leaves_the_users_patterns(
    drawn: list[tuple[frozenset[str], tuple[str, ...]]],
    world: World,
    prefix: str,
    django_user_model: type[User],
    fresh_users: None,
) -> None:
    User.objects.filter(username__startswith="drawn").delete()
    Group.objects.filter(name__startswith="drawn").delete()
    AuditEvent.objects.all().delete()
    groups = [
        role(f"drawn-{i}", tuple(perms), tuple(prefix + p for p in patterns))
        for i, (perms, patterns) in enumerate(drawn)
    ]
    user = member(django_user_model, "drawn-user", *groups)
    client = logged_in(user)
    # The prefix is literal in every pattern, so a pattern matches a short name exactly
    # when prefix + pattern matches the stream's name.
    readable = {world.name(s) for s in SHORT if _expected(drawn, s, "view_queues")}
    reads_somewhere = any("view_queues" in perms for perms, _ in drawn)
    for short in SHORT:
        stream = world.name(short)
        status = client.get(reverse("dashboard:stream-detail", args=[stream])).status_code
        want = 200 if stream in readable else 404 if reads_somewhere else 403
        assert status == want, (short, drawn)
        # Retry: refused (403) exactly where no role grants it on the stream.
        got = retry(client, world, short)
        assert (got == 403) is (not _expected(drawn, short, "retry_entry")), (short, drawn, got)
    if not reads_somewhere:
        return
    assert overview_names(client) == readable
    assert overview_push_names(user) == readable
    assert failure_streams(client) <= readable
    assert failure_streams(client) == readable  # every stream has a failure
    assert metric_streams(client) == readable
    assert audit_streams(client) <= readable


def test_single_sign_on_maps_a_provider_group_to_a_scoped_team_role(
    world: World, django_user_model: type[User], prefix: str, settings: SettingsWrapper
) -> None:
    """``ACKBOARD_OIDC_ROLES``'s ``group:<name>`` names a group of the admin site, whose
    patterns then decide the streams, as for a local user; a group that does not exist
    earns no role (the sign-on is refused)."""
    from django.test import RequestFactory

    from dashboard.access.oidc import REFUSAL_ATTR, RoleMappingBackend

    role("orders team", ("view_queues",), (prefix + "orders:*",))
    settings.ACKBOARD_OIDC_GROUPS_CLAIM = "groups"
    settings.ACKBOARD_OIDC_ROLES = {"orders": "group:orders team", "ghosts": "group:nobody"}
    backend = RoleMappingBackend.__new__(RoleMappingBackend)
    backend.request = RequestFactory().get("/oidc/callback/")
    user = django_user_model.objects.create_user(username="sso-user")

    assert backend.update_user(user, {"groups": ["orders"]}) is user
    assert not hasattr(backend.request, REFUSAL_ATTR)
    assert overview_names(logged_in(user)) == {world.name("orders:a"), world.name("orders:b")}

    backend.update_user(user, {"groups": ["ghosts"]})
    assert hasattr(backend.request, REFUSAL_ATTR)
    assert list(user.groups.all()) == []
