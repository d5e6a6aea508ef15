"""``manage.py ackboard`` on real Redis: every action as a named user, with the buttons'
permission, guards and audit rows (channel "cli"), bulk's dry run, exit statuses, and
the token helper."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.access.api_tokens import token_authenticate
from dashboard.models import ApiToken, AuditEvent
from queue_core.keys import stream_keys
from tests.dashboard.remote_helpers import CASE_IDS, CASES, Case, World, audit_rows, state
from tests.factories import CountingRedis, make_pending
from tests.redis_server import free_port

pytestmark = pytest.mark.django_db


def ackboard(*args: str) -> tuple[int, str, str]:
    """Run the command: its exit status, stdout and stderr (a CommandError's one line)."""
    out, err = StringIO(), StringIO()
    try:
        call_command("ackboard", *args, stdout=out, stderr=err)
    except CommandError as exc:
        err.write(str(exc))
        return exc.returncode, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def args_for(case: Case, w: World, user: str, r: redis.Redis, *, target: str = "") -> list[str]:
    """The command line that aims ``case`` at the world (or at ``target`` instead)."""
    extra = [x for k, v in case.fields.items() for x in (f"--{k.replace('_', '-')}", v)]
    if case.on == "entry":
        return [case.action, w.stream, "g", target or w.entry_id, "--user", user, *extra]
    if case.on == "dead-letter":
        return [case.action, w.stream, target or w.dlq_id, "--user", user, *extra]
    length = str(len(state(r, w)["dlq"]))
    return ["purge", target or w.stream, "--user", user, "--yes", "--expected-length", length]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
class EveryActionTests:
    def test_permitted_user_acts_and_is_audited_under_their_name(
        self, case: Case, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        code, out, err = ackboard(*args_for(case, remote_world, "olga", r))
        assert (code, err) == (0, ""), out
        assert len(out.strip().splitlines()) == 1
        assert case.done(remote_world, before, state(r, remote_world))
        [event] = audit_rows()
        assert (event.action, event.result, event.username) == (case.action, "ok", "olga")
        assert (event.channel, event.user_id) == ("cli", olga.pk)
        assert event.stream == remote_world.stream

    def test_reader_is_denied_and_nothing_changes(
        self, case: Case, remote_world: World, rita: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        code, out, err = ackboard(*args_for(case, remote_world, "rita", r))
        assert code == 3 and out == ""
        assert err == f"You do not have permission to {case.action}."
        assert state(r, remote_world) == before
        assert [(e.result, e.username, e.channel) for e in audit_rows()] == [
            ("refused", "rita", "cli")
        ]

    def test_unknown_target_is_exit_4_with_one_line(
        self, case: Case, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        target = "elsewhere:orders" if case.on == "dead-letters" else "1-1"
        code, out, err = ackboard(*args_for(case, remote_world, "olga", r, target=target))
        assert code == 4, (out, err)
        assert out == "" and len(err.splitlines()) == 1 and "no " in err
        assert state(r, remote_world) == before
        assert AuditEvent.objects.filter(result="ok").count() == 0

    def test_redis_down_is_exit_5_with_one_line(
        self, case: Case, remote_world: World, olga: Any, settings: SettingsWrapper, r: redis.Redis
    ) -> None:
        cmd = args_for(case, remote_world, "olga", r)
        settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        code, out, err = ackboard(*cmd)
        assert (code, out, err) == (5, "", "Redis is unreachable.")
        assert AuditEvent.objects.exclude(result="error").count() == 0


class CommandLineTests:
    def test_unknown_or_inactive_user_is_refused_before_anything(
        self, remote_world: World, olga: Any, django_user_model: Any
    ) -> None:
        django_user_model.objects.create_user("gone", password="pw", is_active=False)
        for name in ("nobody", "gone"):
            code, out, err = ackboard(
                "retry", remote_world.stream, "g", remote_world.entry_id, "--user", name
            )
            assert (code, out) == (3, "") and err == f"no active user {name!r}"
        assert AuditEvent.objects.count() == 0

    def test_acknowledge_without_reason_is_bad_input(self, remote_world: World, olga: Any) -> None:
        code, _, err = ackboard(
            "acknowledge", remote_world.stream, "g", remote_world.entry_id, "--user", "olga"
        )
        assert code == 2 and "needs a reason" in err
        assert [(e.action, e.result) for e in audit_rows()] == [("acknowledge", "refused")]

    def test_one_line_per_id_and_the_worst_exit_status(
        self, remote_world: World, olga: Any
    ) -> None:
        code, out, err = ackboard(
            "retry",
            remote_world.stream,
            "g",
            remote_world.entry_id,
            "1-1",
            remote_world.other_id,
            "--user",
            "olga",
        )
        assert code == 4
        assert len(out.splitlines()) == 2 and all("redelivered" in x for x in out.splitlines())
        assert err.splitlines() == [
            f"no entry 1-1 in stream {remote_world.stream!r}",
            "1 of 3 not done",
        ]
        assert [e.result for e in audit_rows()] == ["ok", "refused", "ok"]

    def test_json_output(self, remote_world: World, olga: Any) -> None:
        code, out, _ = ackboard(
            "dead-letter",
            remote_world.stream,
            "g",
            remote_world.entry_id,
            "--user",
            "olga",
            "--json",
        )
        assert code == 0
        answer = json.loads(out)
        assert answer["ok"] is True and answer["action"] == "dead-letter"
        assert answer["channel"] == "cli" and len(answer["new_ids"]) == 1

    def test_claim_guard_is_the_state_it_read_or_what_you_saw(
        self, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        # What the operator says they saw no longer holds: refused as changed (409).
        code, _, err = ackboard(
            "claim", remote_world.stream, "g", remote_world.entry_id, "--user", "olga",
            "--seen-consumer", "someone-else", "--seen-idle-ms", "0",
        )  # fmt: skip
        assert code == 1 and "changed" in err.lower()
        code, out, _ = ackboard(
            "claim",
            remote_world.stream,
            "g",
            remote_world.entry_id,
            "--user",
            "olga",
            "--consumer",
            "dbg",
        )
        assert code == 0 and "claimed by dbg (was c1)" in out
        event = AuditEvent.objects.order_by("-id")[0]
        assert event.state_before["consumer"] == "c1" and event.reason == ""

    def test_claim_without_a_guard_reads_the_entry_once(
        self, remote_world: World, olga: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The guard a terminal has not seen is the action's own state read: one read,
        then the claim script and its PUBLISH."""
        w = remote_world
        # A refused claim loads the script; the one counted runs it by its SHA.
        ackboard(
            "claim", w.stream, "g", w.entry_id, "--user", "olga",
            "--seen-consumer", "someone-else", "--seen-idle-ms", "0",
        )  # fmt: skip
        counting = CountingRedis(connection_pool=redis.ConnectionPool.from_url(redis_url))
        monkeypatch.setattr("dashboard.views.actions.get_redis", lambda: counting)
        monkeypatch.setattr("dashboard.views.remote.get_redis", lambda: counting)
        code, out, _ = ackboard("claim", w.stream, "g", w.entry_id, "--user", "olga")
        assert code == 0 and "claimed by" in out
        assert counting.round_trips == 3
        counting.close()


class PurgeTests:
    def test_dry_run_shows_what_the_confirmation_must_name(
        self, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        code, out, _ = ackboard("purge", remote_world.stream, "--user", "olga")
        assert code == 0
        assert f"--yes --expected-length 1 --newest-id {remote_world.dlq_id}" in out
        assert state(r, remote_world) == before and AuditEvent.objects.count() == 0

    def test_changed_since_the_dry_run_is_refused(
        self, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        r.xadd(stream_keys(remote_world.stream).dlq, {"late": "1"})
        before = state(r, remote_world)
        code, _, _ = ackboard(
            "purge", remote_world.stream, "--user", "olga", "--yes", "--expected-length", "1"
        )
        assert code == 1
        assert state(r, remote_world) == before
        assert [(e.action, e.result) for e in audit_rows()] == [("purge", "refused")]


class BulkTests:
    def test_dry_run_changes_nothing_and_is_not_audited(
        self, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        code, out, _ = ackboard("bulk", "retry", remote_world.stream, "g", "--user", "olga")
        assert code == 0
        assert "Dry run: 2 entries matching the filter are pending" in out
        assert f"--yes --snapshot-id {remote_world.other_id}" in out
        assert state(r, remote_world) == before and AuditEvent.objects.count() == 0

    def test_confirm_needs_the_snapshot_the_dry_run_printed(
        self, remote_world: World, olga: Any
    ) -> None:
        code, _, err = ackboard(
            "bulk", "retry", remote_world.stream, "g", "--user", "olga", "--yes"
        )
        assert code == 2 and "snapshot id its dry run printed" in err
        assert AuditEvent.objects.count() == 0

    def test_confirm_acts_up_to_the_snapshot_only_and_is_audited(
        self, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        _, out, _ = ackboard("bulk", "dead-letter", remote_world.stream, "g", "--user", "olga")
        snapshot = out.split("--snapshot-id ")[1].rstrip(".\n")
        [late] = make_pending(
            r, remote_world.stream, "g", "c1", 1, create=False
        )  # after the dry run
        code, out, _ = ackboard(
            "bulk", "dead-letter", remote_world.stream, "g", "--user", "olga",
            "--yes", "--snapshot-id", snapshot, "--reason", "poison batch",
        )  # fmt: skip
        assert code == 0 and out.startswith("Dead-lettered 2 entries.")
        assert [row[0] for row in state(r, remote_world)["pel"]] == [late]
        [event] = audit_rows()
        assert (event.action, event.username, event.channel) == ("bulk-dead-letter", "olga", "cli")
        assert event.entry_ids == [remote_world.entry_id, remote_world.other_id]
        assert event.reason == "poison batch"

    def test_capped_steps_continue_from_the_cursor(
        self, remote_world: World, olga: Any, settings: SettingsWrapper, r: redis.Redis
    ) -> None:
        settings.ACKBOARD_BULK_CAP = 1
        _, out, _ = ackboard("bulk", "acknowledge", remote_world.stream, "g", "--user", "olga",
                             "--reason", "r")  # fmt: skip
        assert "More may match" in out
        snapshot = out.split("--snapshot-id ")[1].rstrip(".\n")
        code, out, _ = ackboard(
            "bulk", "acknowledge", remote_world.stream, "g", "--user", "olga", "--reason", "r",
            "--yes", "--snapshot-id", snapshot,
        )  # fmt: skip
        assert code == 0 and "more remain" in out and "--continue" in out
        steps = 1
        while "Continue with " in out and steps < 5:
            rest = out.split("Continue with ")[1].rstrip(".\n").split()
            base = ["bulk", "acknowledge", remote_world.stream, "g", "--user", "olga"]
            code, out, _ = ackboard(*base, "--reason", "r", *rest)
            assert code == 0
            steps += 1
        # Each step handled at most one entry; the totals carried across the steps.
        assert out.startswith("Acknowledged 0 entries.") or out.startswith("Acknowledged 1 entry.")
        assert state(r, remote_world)["pel"] == []
        events = audit_rows()
        assert [e.action for e in events] == ["bulk-acknowledge"] * steps
        assert sorted(i for e in events for i in e.entry_ids) == sorted(
            [remote_world.entry_id, remote_world.other_id]
        )

    def test_reader_is_denied_even_a_dry_run(
        self, remote_world: World, rita: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        code, _, err = ackboard("bulk", "retry", remote_world.stream, "g", "--user", "rita")
        assert code == 3 and "permission" in err
        assert state(r, remote_world) == before
        assert [e.result for e in audit_rows()] == ["refused"]

    def test_redis_down(self, remote_world: World, olga: Any, settings: SettingsWrapper) -> None:
        settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        for extra in ([], ["--yes", "--snapshot-id", remote_world.other_id]):
            code, out, err = ackboard(
                "bulk", "retry", remote_world.stream, "g", "--user", "olga", *extra
            )
            assert (code, out, err) == (5, "", "Redis is unreachable.")


class TokenCommandTests:
    def test_issue_list_revoke(self, olga: Any) -> None:
        code, out, _ = ackboard("token", "issue", "--user", "olga", "--name", "on-call", "--json")
        assert code == 0
        issued = json.loads(out)
        token = issued["token"]
        row = token_authenticate(token)
        assert row is not None and row.user == olga
        # Only a hash is stored, and the listing never shows the secret.
        assert token not in json.dumps(list(ApiToken.objects.values()), default=str)
        code, out, _ = ackboard("token", "list")
        assert code == 0 and issued["key_id"] in out and token not in out and "live" in out
        code, out, _ = ackboard("token", "revoke", issued["key_id"])
        assert code == 0 and "revoked" in out
        assert token_authenticate(token) is None
        assert "revoked" in ackboard("token", "list", "--user", "olga")[1]

    def test_unknown_user_and_token(self) -> None:
        assert ackboard("token", "issue", "--user", "nobody", "--name", "x")[0] == 3
        assert ackboard("token", "revoke", "000000000000")[0] == 4
