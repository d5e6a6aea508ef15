"""Redrive dead letters, on real Redis: the dry run's count per filter, the
job's creation and controls (permission 403, audit rows, bad input 400, 409 for a state
that does not allow it), the runner (canary then waiting, Continue, throttled rest,
Pause and Cancel seen before the next replay), and "never twice": two runners racing on
one job, and a runner that dies between a replay and saving its progress.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from dashboard.access.api_tokens import token_issue
from dashboard.access.audit import audit_for_entry
from dashboard.models import AuditEvent
from dashboard.redrive import canary, runner, selection, service
from dashboard.redrive.models import RedriveJob
from dashboard.redrive.selection import RedriveFilter
from queue_core import services
from queue_core.keys import REPLAY_OF_FIELD, stream_keys
from tests.dashboard.action_helpers import HTMX, last_audit
from tests.factories import indexed_failure, make_pending, make_user
from tests.html import element_text
from tests.waiting import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("remote_settings")]

State = RedriveJob.State


def dead_letters(
    r: redis.Redis, stream: str, n: int, *, group: str = "g", reason: str = "max deliveries"
) -> list[tuple[str, str]]:
    """``n`` entries of ``group`` dead-lettered: [(dlq id, origin id)]."""
    ids = make_pending(r, stream, group, "c1", n)
    out = []
    for entry_id in ids:
        moved = services.entry_dead_letter(
            client=r, stream=stream, group=group, entry_id=entry_id, reason=reason
        )
        assert moved is not None
        out.append((moved.dlq_id, entry_id))
    return out


def replays(r: redis.Redis, stream: str) -> list[str]:
    """The origin ids of the replayed entries on the stream (``ackboard.replay-of``)."""
    key = REPLAY_OF_FIELD.encode()
    return [f[key].decode() for _, f in r.xrange(stream) if key in f]


def dlq_len(r: redis.Redis, stream: str) -> int:
    return int(r.xlen(stream_keys(stream).dlq))


def make_job(r: redis.Redis, stream: str, user: Any, **data: Any) -> RedriveJob:
    outcome = service.redrive(user=user, client=r, stream=stream, data=data, confirm=True)
    assert outcome.status == 200, outcome.message
    assert outcome.job is not None
    return outcome.job


def run(r: redis.Redis, job: RedriveJob, owner: str = "t1", **kw: Any) -> str:
    taken = runner.claim(owner, job_id=job.pk)
    assert taken is not None
    return runner.work(r, taken, owner, stopping=threading.Event(), **kw)


@pytest.fixture
def operator(django_user_model: Any) -> Any:
    return make_user(django_user_model, "olga", "view_queues", "redrive_dead_letters")


@pytest.fixture
def fast(settings: Any) -> None:
    settings.ACKBOARD_REDRIVE_MAX_RATE = 10_000


# --- the dry run ------------------------------------------------------------------------


class DryRunTests:
    def test_count_per_filter(self, r: redis.Redis, stream: str) -> None:
        a = dead_letters(r, stream, 4, group="a", reason="max deliveries")
        # b's dead-letter ids are in later milliseconds than a's: Redis's clock moves on.
        last_ms = int(a[-1][0].split("-")[0])
        wait_until(lambda: int(r.time()[0]) * 1000 + int(r.time()[1]) // 1000 > last_ms,
                   what="Redis's clock past a's last dead letter")  # fmt: skip
        b = dead_letters(r, stream, 3, group="b", reason="operator: bad payload")

        def count(**f: Any) -> int:
            return selection.dry_run(r, stream, RedriveFilter(**f)).count

        assert count() == 7
        assert count(group="a") == 4
        assert count(group="b") == 3
        assert count(group="zzz") == 0
        assert count(reason_contains="BAD PAYLOAD") == 3
        first_b_ms = int(b[0][0].split("-")[0])
        assert count(since_ms=first_b_ms) == 3
        assert count(until_ms=first_b_ms - 1) == 4
        assert count(since_ms=first_b_ms, group="a") == 0
        assert count(until_ms=first_b_ms - 10_000) == 0

    def test_fingerprint_is_the_last_failure_of_the_origin_entry(
        self, r: redis.Redis, stream: str
    ) -> None:
        letters = dead_letters(r, stream, 3)
        (_, e1), (_, e2), (_, e3) = letters
        # e1: last failure "aaaa" (an older "bbbb"); e2: "bbbb"; e3: no indexed failure.
        indexed_failure(stream=stream, group="g", entry_id=e1, fingerprint="bbbb", minutes=1)
        indexed_failure(stream=stream, group="g", entry_id=e1, fingerprint="aaaa", minutes=2)
        indexed_failure(stream=stream, group="g", entry_id=e2, fingerprint="bbbb", minutes=3)
        indexed_failure(stream=stream, group="other", entry_id=e3, fingerprint="aaaa", minutes=4)
        dry = selection.dry_run(r, stream, RedriveFilter(fingerprint="aaaa"))
        assert dry.count == 1
        assert selection.dry_run(r, stream, RedriveFilter(fingerprint="bbbb")).count == 1

    def test_dry_run_changes_nothing_and_says_so(
        self, r: redis.Redis, stream: str, operator: Any
    ) -> None:
        dead_letters(r, stream, 3)
        before = AuditEvent.objects.count()
        client = Client()
        client.force_login(operator)
        url = reverse("dashboard:redrive-start", args=[stream])
        response = client.post(url, {"dry_run": "1", "group": "g"}, headers=HTMX)
        assert response.status_code == 200
        assert 'data-redrive-count="3"' in response.content.decode()
        assert dlq_len(r, stream) == 3
        assert not RedriveJob.objects.exists()
        assert AuditEvent.objects.count() == before

    def test_budget_says_at_least(self, r: redis.Redis, stream: str) -> None:
        dead_letters(r, stream, 30)
        dry = selection.dry_run(r, stream, RedriveFilter(), budget=10)
        assert not dry.complete
        assert dry.text.startswith("at least")


# --- creating and controlling a job -------------------------------------------------------


class CreateTests:
    def test_button_creates_an_audited_job(
        self, r: redis.Redis, stream: str, operator: Any
    ) -> None:
        letters = dead_letters(r, stream, 5)
        client = Client()
        client.force_login(operator)
        url = reverse("dashboard:redrive-start", args=[stream])
        response = client.post(url, {"confirm": "1", "canary": "2", "rate": "5"}, headers=HTMX)
        assert response.status_code == 200, response.content
        assert response["HX-Refresh"] == "true"
        job = RedriveJob.objects.get()
        assert (job.state, job.canary, job.rate, job.matched) == (State.CANARY, 2, 5.0, 5)
        assert job.upto_id == letters[-1][0]
        row = last_audit()
        assert (row.action, row.result, row.username, row.channel) == (
            "redrive", "ok", "olga", "button",
        )  # fmt: skip
        assert row.state_before["job"] == job.pk
        assert row.state_before["matched"] == 5

    def test_without_permission_403_and_audited(
        self, r: redis.Redis, stream: str, django_user_model: Any
    ) -> None:
        dead_letters(r, stream, 2)
        reader = make_user(django_user_model, "rita", "view_queues")
        client = Client()
        client.force_login(reader)
        url = reverse("dashboard:redrive-start", args=[stream])
        response = client.post(url, {"confirm": "1"}, headers=HTMX)
        assert response.status_code == 403
        assert not RedriveJob.objects.exists()
        row = last_audit()
        assert (row.action, row.result, row.username) == ("redrive", "refused", "rita")
        # and the dialog is not on the page for a reader
        page = client.get(reverse("dashboard:dlq", args=[stream])).content.decode()
        assert "data-redrive-open" not in page

    def test_csrf_is_checked(self, r: redis.Redis, stream: str, operator: Any) -> None:
        dead_letters(r, stream, 1)
        client = Client(enforce_csrf_checks=True)
        client.force_login(operator)
        response = client.post(reverse("dashboard:redrive-start", args=[stream]), {"confirm": "1"})
        assert response.status_code == 403
        assert not RedriveJob.objects.exists()

    @pytest.mark.parametrize(
        ("data", "says"),
        [
            ({"rate": "0"}, "rate must be between"),
            ({"rate": "nan"}, "rate must be between"),
            ({"rate": "100000"}, "rate must be between"),
            ({"rate": "fast"}, "rate must be a number"),
            ({"canary": "-1"}, "canary must be between"),
            ({"canary": "2.5"}, "canary must be a whole number"),
            ({"fingerprint": "not hex!"}, "fingerprint must be"),
            ({"since": "yesterday"}, "since must be a time"),
            ({"since": "2026-01-02T00:00", "until": "2026-01-01T00:00"}, "since is after until"),
            ({"group": "x" * 2000}, "longer than"),
            ({"reason_contains": "a\x00b"}, "NUL"),
        ],
    )
    def test_bad_input_is_a_clear_400(
        self, r: redis.Redis, stream: str, operator: Any, data: dict[str, str], says: str
    ) -> None:
        dead_letters(r, stream, 1)
        client = Client()
        client.force_login(operator)
        url = reverse("dashboard:redrive-start", args=[stream])
        response = client.post(url, {"confirm": "1", **data}, headers=HTMX)
        assert response.status_code == 400
        assert says in response.content.decode()
        assert not RedriveJob.objects.exists()

    def test_nothing_to_redrive_is_409(self, r: redis.Redis, stream: str, operator: Any) -> None:
        dead_letters(r, stream, 1, group="a")
        outcome = service.redrive(user=operator, client=r, stream=stream,
                                  data={"group": "b"}, confirm=True)  # fmt: skip
        assert outcome.status == 409
        assert last_audit().result == "refused"

    def test_time_range_as_utc_text(self, r: redis.Redis, stream: str) -> None:
        dead_letters(r, stream, 2)
        now = datetime.now(UTC)
        minute = "%Y-%m-%dT%H:%M"
        since = (now - timedelta(minutes=5)).strftime(minute)
        until = (now + timedelta(minutes=5)).strftime(minute)
        filt, _, _ = service.parse({"since": since, "until": until})
        assert selection.dry_run(r, stream, filt).count == 2
        filt, _, _ = service.parse({"until": (now - timedelta(minutes=5)).isoformat()})
        assert selection.dry_run(r, stream, filt).count == 0


class ControlTests:
    def test_pause_resume_cancel_audited_and_guarded(
        self, r: redis.Redis, stream: str, operator: Any
    ) -> None:
        dead_letters(r, stream, 3)
        job = make_job(r, stream, operator)
        client = Client()
        client.force_login(operator)

        def post(action: str) -> int:
            url = reverse("dashboard:redrive-control", args=[job.pk, action])
            return client.post(url, headers=HTMX).status_code

        assert post("continue") == 409  # running, not waiting for the operator
        assert (last_audit().action, last_audit().result) == ("redrive-continue", "refused")
        assert post("pause") == 200
        assert RedriveJob.objects.get().state == State.PAUSED
        assert (last_audit().action, last_audit().result) == ("redrive-pause", "ok")
        assert post("resume") == 200
        assert RedriveJob.objects.get().state == State.RUNNING
        assert post("cancel") == 200
        assert RedriveJob.objects.get().state == State.CANCELLED
        assert post("resume") == 409
        assert post("explode") == 400
        url = reverse("dashboard:redrive-control", args=[9999, "pause"])
        assert client.post(url, headers=HTMX).status_code == 404

    def test_control_without_permission_is_403(
        self, r: redis.Redis, stream: str, operator: Any, django_user_model: Any
    ) -> None:
        dead_letters(r, stream, 1)
        job = make_job(r, stream, operator)
        client = Client()
        client.force_login(make_user(django_user_model, "rita", "view_queues"))
        url = reverse("dashboard:redrive-control", args=[job.pk, "cancel"])
        assert client.post(url, headers=HTMX).status_code == 403
        assert RedriveJob.objects.get().state == State.RUNNING
        assert (last_audit().action, last_audit().result) == ("redrive-cancel", "refused")

    def test_a_paused_job_is_not_worked_and_a_cancelled_one_stops(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        dead_letters(r, stream, 5)
        job = make_job(r, stream, operator, rate="1000")
        service.control(user=operator, job_id=job.pk, action="pause")
        assert runner.claim("t1") is None  # a paused job is never taken
        assert replays(r, stream) == []
        service.control(user=operator, job_id=job.pk, action="resume")
        # Cancel after two replays: the runner sees it before the third.
        done: list[int] = []

        def sleep(s: float) -> None:
            time.sleep(s)  # the runner's own pace (its rate), as in production

        orig = runner.replay_one

        def replay_then_cancel(client: Any, j: RedriveJob, dlq_id: str) -> str:
            out = orig(client, j, dlq_id)
            done.append(1)
            if len(done) == 2:
                service.control(user=operator, job_id=job.pk, action="cancel")
            return out

        runner.replay_one = replay_then_cancel  # type: ignore[assignment]
        try:
            why = run(r, job, sleep=sleep)
        finally:
            runner.replay_one = orig
        assert why == State.CANCELLED
        assert len(replays(r, stream)) == 2
        job.refresh_from_db()
        assert job.replayed == 2
        assert dlq_len(r, stream) == 3


# --- the runner -------------------------------------------------------------------------------


class RunnerTests:
    def test_canary_then_waiting_then_continue_to_done(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        letters = dead_letters(r, stream, 8)
        job = make_job(r, stream, operator, canary="3", rate="1000")
        assert run(r, job) == "waiting"
        job.refresh_from_db()
        assert job.state == State.WAITING
        assert [c["dlq_id"] for c in job.canary_replays] == [d for d, _ in letters[:3]]
        assert sorted(replays(r, stream)) == sorted(o for _, o in letters[:3])
        assert runner.claim("t1") is None  # waiting for the operator
        # Outcomes: ack the first canary entry in its group, fail the second.
        new = [c["new_id"] for c in job.canary_replays]
        got = r.xreadgroup("g", "c2", {stream: ">"}, count=10)
        assert [e[0].decode() for e in got[0][1]] == new
        r.xack(stream, "g", new[0])
        indexed_failure(stream=stream, group="g", entry_id=new[1], message="still broken")
        outcomes = {row.new_id: row.outcome for row in canary.outcomes(r, job)}
        assert outcomes == {new[0]: canary.PROCESSED, new[1]: canary.FAILED,
                            new[2]: canary.PENDING}  # fmt: skip
        # The panel shows them.
        client = Client()
        client.force_login(operator)
        page = client.get(reverse("dashboard:dlq", args=[stream])).content.decode()
        assert 'data-canary-outcome="processed"' in page
        assert 'data-canary-outcome="failed again"' in page
        assert 'data-redrive-action="continue"' in page
        assert service.control(user=operator, job_id=job.pk, action="continue").ok
        assert run(r, job) == "done"
        job.refresh_from_db()
        assert (job.state, job.replayed, job.gone, job.refused) == (State.DONE, 8, 0, 0)
        assert sorted(replays(r, stream)) == sorted(o for _, o in letters)
        assert dlq_len(r, stream) == 0
        assert last_audit().action == "redrive-finished"

    def test_each_replayed_entry_has_its_audit_row_on_both_entries_pages(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        letters = dead_letters(r, stream, 3)
        job = make_job(r, stream, operator, canary="0", rate="1000")
        assert run(r, job) == "done"
        rows = list(AuditEvent.objects.filter(action="redrive-replay").order_by("id"))
        assert [(e.result, e.group, e.channel) for e in rows] == [("ok", "g", "cli")] * 3
        assert [(e.state_before["dlq_id"], e.entry_ids[0]) for e in rows] == letters
        client = Client()
        client.force_login(operator)
        for (dlq_id, origin), event in zip(letters, rows, strict=True):
            [new_id] = event.new_ids
            assert f"redrive #{job.pk} (started by {operator.username})" in event.detail
            for entry_id in (origin, new_id):  # where it came from, and what it became
                assert event in audit_for_entry(stream=stream, entry_id=entry_id)
            page = client.get(reverse("dashboard:entry-detail", args=[stream, new_id]))
            audit = element_text(page.content.decode(), "entry-audit")
            assert "redrive-replay" in audit and dlq_id in audit

    def test_a_canary_entry_dead_lettered_again_is_not_replayed_again(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        dead_letters(r, stream, 4)
        job = make_job(r, stream, operator, canary="1", rate="1000")
        run(r, job)
        job.refresh_from_db()
        new_id = job.canary_replays[0]["new_id"]
        r.xreadgroup("g", "c2", {stream: ">"}, count=10)
        services.entry_dead_letter(client=r, stream=stream, group="g", entry_id=new_id,
                                   reason="failed again")  # fmt: skip
        rows = canary.outcomes(r, job)
        assert [row.outcome for row in rows] == [canary.DEAD]
        # The runner notes the replay's time after XADD returned; a worker may have
        # dead-lettered it before that instant. The outcome must not depend on it.
        late = [{**c, "at_ms": int(c["at_ms"]) + 60_000} for c in job.canary_replays]
        job.canary_replays = late
        assert [row.outcome for row in canary.outcomes(r, job)] == [canary.DEAD]
        job.refresh_from_db()
        service.control(user=operator, job_id=job.pk, action="continue")
        assert run(r, job) == "done"
        assert len(replays(r, stream)) == 4  # the 4 originals, once each
        assert dlq_len(r, stream) == 1  # the canary's failure stays for a look

    def test_stop_after_the_canary(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        dead_letters(r, stream, 4)
        job = make_job(r, stream, operator, canary="2", rate="1000")
        run(r, job)
        assert service.control(user=operator, job_id=job.pk, action="stop").ok
        assert runner.claim("t1") is None
        assert len(replays(r, stream)) == 2
        assert dlq_len(r, stream) == 2
        row = last_audit()
        assert row.action == "redrive-stop"
        assert len(row.new_ids) == 2

    def test_rate_is_a_token_bucket_capped_by_the_setting(
        self, r: redis.Redis, stream: str, operator: Any, settings: Any
    ) -> None:
        settings.ACKBOARD_REDRIVE_MAX_RATE = 20
        dead_letters(r, stream, 11)
        outcome = service.redrive(user=operator, client=r, stream=stream,
                                  data={"rate": "50"}, confirm=True)  # fmt: skip
        assert outcome.status == 400  # above the cap
        job = make_job(r, stream, operator, rate="20")
        started = time.monotonic()
        assert run(r, job) == "done"
        took = time.monotonic() - started
        # 11 replays at 20/s: the first at once, then one per 50 ms.
        assert 0.45 <= took <= 1.5, took

    def test_bucket_arithmetic(self) -> None:
        now = [0.0]
        bucket = runner.TokenBucket(rate=4, clock=lambda: now[0])
        assert bucket.delay() == 0
        bucket.take()
        assert bucket.delay() == pytest.approx(0.25)
        now[0] = 0.25
        assert bucket.delay() == 0

    def test_refusals_are_counted_and_leave_the_dead_letter(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        letters = dead_letters(r, stream, 4)
        job = make_job(r, stream, operator, rate="1000")
        services.dlq_delete(client=r, stream=stream, dlq_id=letters[0][0])  # deleted: not read
        r.xgroup_destroy(stream, "g")  # every replay refused: the group is gone
        assert run(r, job) == "done"
        job.refresh_from_db()
        assert (job.replayed, job.gone, job.refused) == (0, 0, 3)
        assert dlq_len(r, stream) == 3  # a refused dead letter stays where it was
        assert "no longer exists" in job.last_error


# --- never twice ---------------------------------------------------------------------------


class NeverTwiceTests:
    def test_two_runners_cannot_both_take_a_job(
        self, r: redis.Redis, stream: str, operator: Any
    ) -> None:
        dead_letters(r, stream, 2)
        job = make_job(r, stream, operator)
        assert runner.claim("a", job_id=job.pk) is not None
        assert runner.claim("b", job_id=job.pk) is None
        RedriveJob.objects.filter(pk=job.pk).update(lease_until=time.time() - 1)  # expired
        assert runner.claim("b", job_id=job.pk) is not None
        assert runner.claim("a", job_id=job.pk) is None

    def test_a_runner_restarting_from_a_stale_cursor_replays_nothing_again(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        """Runner a finishes the job; runner b then works it from the row as it was read
        before a started (cursor empty, as after a lost progress save): every replay b
        reads is gone, so it replays nothing, and each origin id is on the stream once."""
        letters = dead_letters(r, stream, 30)
        job = make_job(r, stream, operator, rate="1000")
        stale = RedriveJob.objects.get(pk=job.pk)
        assert run(r, job, owner="a") == "done"
        RedriveJob.objects.filter(pk=job.pk).update(state=State.RUNNING, lease_owner="b",
                                                    lease_until=time.time() + 10)  # fmt: skip
        assert runner.work(r, stale, "b", stopping=threading.Event()) == "done"
        assert stale.replayed == 0  # what a replayed is gone from the DLQ: never read again
        origins = replays(r, stream)
        assert sorted(origins) == sorted(o for _, o in letters)
        assert len(origins) == len(set(origins)) == 30

    def test_a_runner_whose_lease_was_taken_stops_at_its_next_save(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        dead_letters(r, stream, 5)
        job = make_job(r, stream, operator, rate="1000")
        taken = runner.claim("a", job_id=job.pk)
        assert taken is not None
        RedriveJob.objects.filter(pk=job.pk).update(lease_owner="b")
        assert runner.work(r, taken, "a", stopping=threading.Event()) == "lost"
        assert len(replays(r, stream)) == 1  # the replay under way, then it stopped

    def test_threads_racing_on_the_same_dead_letters(
        self, r: redis.Redis, stream: str, redis_url: str
    ) -> None:
        """Eight threads replay the same 40 dead letters at once through the runner's
        replay step: each is replayed exactly once, the rest are "gone"."""
        letters = dead_letters(r, stream, 40)
        outcomes: list[str] = []
        lock = threading.Lock()

        def go() -> None:
            client = redis.Redis.from_url(redis_url)
            local = RedriveJob(stream=stream, state=State.RUNNING, rate=1, upto_id=letters[-1][0])
            for dlq_id, _ in letters:
                out = runner.replay_one(client, local, dlq_id)
                with lock:
                    outcomes.append(out)

        threads = [threading.Thread(target=go) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcomes.count("replayed") == 40
        assert outcomes.count("gone") == 7 * 40
        origins = replays(r, stream)
        assert sorted(origins) == sorted(o for _, o in letters)

    def test_a_runner_dying_after_a_replay_before_saving(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        """The runner replays, then dies before its progress save (its cursor is stale):
        the next runner starts after the saved cursor, and the dead letter it replayed
        without saving is no longer in the DLQ to be replayed again."""
        letters = dead_letters(r, stream, 5)
        job = make_job(r, stream, operator, rate="1000")
        taken = runner.claim("dies", job_id=job.pk)
        assert taken is not None

        class Died(Exception):
            pass

        orig_save, orig_replay = runner._Work.save, runner.replay_one
        replayed = [0]

        def replay(*args: Any, **kwargs: Any) -> str:
            replayed[0] += 1
            return orig_replay(*args, **kwargs)

        def save(self: Any, **extra: Any) -> None:
            # The first save after the 3rd replay (not a count of saves: the token bucket's
            # waits save too, to renew the lease, as many times as the machine is fast).
            if replayed[0] == 3:
                raise Died
            orig_save(self, **extra)

        runner._Work.save = save  # type: ignore[method-assign]
        runner.replay_one = replay
        try:
            with pytest.raises(Died):
                runner.work(r, taken, "dies", stopping=threading.Event())
        finally:
            runner._Work.save = orig_save  # type: ignore[method-assign]
            runner.replay_one = orig_replay
        saved = RedriveJob.objects.get(pk=job.pk)
        assert saved.replayed == 2 and saved.cursor == letters[1][0]
        RedriveJob.objects.filter(pk=job.pk).update(lease_until=0)  # its lease expires
        assert run(r, job, owner="next") == "done"
        job.refresh_from_db()
        # 2 saved + 2 by the next runner: the replay whose save was lost is not counted
        # (at most one per killed runner), but it happened once, and only once.
        assert (job.replayed, job.gone) == (4, 0)
        origins = replays(r, stream)
        assert sorted(origins) == sorted(o for _, o in letters)
        assert len(origins) == 5


# --- live, CLI, API ---------------------------------------------------------------------------


class SurfaceTests:
    def test_dlq_signature_moves_with_the_job_progress(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        from dashboard.redrive.live import redrive_stamp

        dead_letters(r, stream, 3)
        before = redrive_stamp(stream)
        job = make_job(r, stream, operator, rate="1000")
        created = redrive_stamp(stream)
        assert created != before
        run(r, job)
        assert redrive_stamp(stream) != created

    def test_page_shows_the_panel_and_progress(
        self, r: redis.Redis, stream: str, operator: Any, fast: None
    ) -> None:
        from tests.html import element_text

        dead_letters(r, stream, 3)
        job = make_job(r, stream, operator, rate="1000")
        run(r, job)
        client = Client()
        client.force_login(operator)
        page = client.get(reverse("dashboard:dlq", args=[stream])).content.decode()
        panel = element_text(page, f"redrive-job-{job.pk}")
        assert "3 of 3 replayed" in " ".join(panel.split())
        assert "data-redrive-open" in page


class RemoteTests:
    def test_cli_dry_run_then_start_then_pause(
        self, r: redis.Redis, stream: str, operator: Any
    ) -> None:
        dead_letters(r, stream, 3)
        out = StringIO()
        call_command("ackboard", "redrive", stream, "--user", "olga", stdout=out)
        assert "3 dead letters would be replayed" in out.getvalue()
        assert not RedriveJob.objects.exists()
        out = StringIO()
        call_command("ackboard", "redrive", stream, "--user", "olga", "--yes",
                     "--canary", "1", "--rate", "2", stdout=out)  # fmt: skip
        job = RedriveJob.objects.get()
        assert (job.canary, job.rate, job.state) == (1, 2.0, State.CANARY)
        assert last_audit().channel == "cli"
        call_command("ackboard", "redrive-job", str(job.pk), "pause", "--user", "olga",
                     stdout=StringIO())  # fmt: skip
        assert RedriveJob.objects.get().state == State.PAUSED
        with pytest.raises(CommandError) as refused:
            call_command("ackboard", "redrive-job", str(job.pk), "continue", "--user", "olga",
                         stdout=StringIO(), stderr=StringIO())  # fmt: skip
        assert refused.value.returncode == 1

    def test_api_dry_run_and_start(self, r: redis.Redis, stream: str, operator: Any) -> None:
        dead_letters(r, stream, 2)
        _, secret = token_issue(user=operator, name="ci")
        client = Client()
        auth = {"Authorization": f"Bearer {secret}"}
        url = reverse("dashboard:api-redrive")
        response = client.post(url, {"stream": stream}, content_type="application/json",
                               headers=auth)  # fmt: skip
        assert response.status_code == 200
        assert response.json()["would_replay"] == 2
        response = client.post(url, {"stream": stream, "confirm": True, "rate": 3},
                               content_type="application/json", headers=auth)  # fmt: skip
        assert response.status_code == 200
        job_id = response.json()["job"]["id"]
        assert last_audit().channel == "api"
        url = reverse("dashboard:api-redrive-control", args=[job_id, "cancel"])
        response = client.post(url, content_type="application/json", headers=auth)
        assert response.status_code == 200
        assert response.json()["job"]["state"] == "cancelled"
        response = client.post(reverse("dashboard:api-redrive"), "[1]",
                               content_type="application/json", headers=auth)  # fmt: skip
        assert response.status_code == 400


class RedisDownTests:
    def test_redrive_with_redis_down_is_a_503_not_a_500(
        self, r: redis.Redis, stream: str, operator: Any, settings: Any
    ) -> None:
        from tests.redis_server import free_port

        dead_letters(r, stream, 1)
        settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        client = Client(raise_request_exception=False)
        client.force_login(operator)
        url = reverse("dashboard:redrive-start", args=[stream])
        for data in ({"dry_run": "1"}, {"confirm": "1"}):
            response = client.post(url, data, headers=HTMX)
            assert response.status_code == 503, response.status_code
        assert not RedriveJob.objects.exists()


def test_a_link_with_a_fingerprint_opens_the_dialog_filled_in(
    r: redis.Redis, stream: str, operator: Any
) -> None:
    dead_letters(r, stream, 1)
    client = Client()
    client.force_login(operator)
    url = reverse("dashboard:dlq", args=[stream])
    page = client.get(url, {"fingerprint": "abc123", "group": "g"}).content.decode()
    dialog = re.search(r'<details class="redrive-dialog" id="redrive-dialog"( open)?>', page)
    assert dialog is not None and dialog.group(1) == " open"
    assert re.search(r'name="fingerprint"[^>]*value="abc123"', page)
    plain = client.get(url).content.decode()
    assert '<details class="redrive-dialog" id="redrive-dialog">' in plain


def test_the_pushed_panel_has_the_controls_only_for_those_who_may(
    r: redis.Redis, stream: str, operator: Any, fast: None
) -> None:
    from dashboard.live.registry import Surface, surface_context
    from dashboard.live.render import surface_render

    dead_letters(r, stream, 4)
    job = make_job(r, stream, operator, canary="2", rate="1000")
    run(r, job)
    surface = Surface("dlq", stream=stream)
    context = surface_context(surface=surface, client=r)
    may = {"dashboard.view_queues", "dashboard.redrive_dead_letters"}
    pushed = surface_render(surface=surface, context=context, perms=frozenset(may))
    panel = pushed["redrive-panel"]
    assert panel.startswith('<section id="redrive-panel"')
    assert f'id="redrive-job-{job.pk}" data-redrive-state="waiting"' in panel
    assert 'data-redrive-action="continue"' in panel
    assert panel.count("data-canary-outcome=") == 2
    reader = surface_render(surface=surface, context=context,
                            perms=frozenset({"dashboard.view_queues"}))  # fmt: skip
    assert 'data-redrive-state="waiting"' in reader["redrive-panel"]
    assert "data-redrive-action" not in reader["redrive-panel"]


def test_the_panel_names_the_filter_and_time_range_in_utc(
    r: redis.Redis, stream: str, operator: Any
) -> None:
    from tests.html import element_text

    dead_letters(r, stream, 2)
    job = make_job(r, stream, operator, group="g", reason_contains="max",
                   since="2020-01-02T03:04:05", until=str(4_102_444_800_000))  # fmt: skip
    client = Client()
    client.force_login(operator)
    page = client.get(reverse("dashboard:dlq", args=[stream])).content.decode()
    text = " ".join(element_text(page, f"redrive-job-{job.pk}").split())
    assert "group g" in text
    assert "reason contains “max”" in text
    assert "from 2020-01-02 03:04:05 UTC to 2100-01-01 00:00:00 UTC" in text


@pytest.mark.parametrize("job_id", ["99999999999999999999999", "0", "9223372036854775808"])
def test_hostile_job_ids_are_404_never_500(operator: Any, job_id: str) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(operator)
    for url in (f"/redrive/{job_id}/pause/", f"/redrive/{job_id}/"):
        response = (client.post if url.endswith("pause/") else client.get)(url, headers=HTMX)
        assert response.status_code == 404, (url, response.status_code)
    _, secret = token_issue(user=operator, name="ci")
    response = client.post(f"/api/v1/redrive/{job_id}/pause", content_type="application/json",
                           headers={"Authorization": f"Bearer {secret}"})  # fmt: skip
    assert response.status_code == 404


def test_a_running_job_says_about_how_long_is_left(
    r: redis.Redis, stream: str, operator: Any
) -> None:
    from tests.html import element_text

    dead_letters(r, stream, 3)
    job = make_job(r, stream, operator, rate="0.1")  # 3 at 0.1/s: about 30 s
    client = Client()
    client.force_login(operator)
    page = client.get(reverse("dashboard:dlq", args=[stream])).content.decode()
    text = " ".join(element_text(page, f"redrive-job-{job.pk}").split())
    assert "0 of 3 replayed · about 30 s left" in text
    RedriveJob.objects.filter(pk=job.pk).update(matched=1000)
    page = client.get(reverse("dashboard:dlq", args=[stream])).content.decode()
    assert "about 2 h 46 min left" in " ".join(element_text(page, f"redrive-job-{job.pk}").split())
