"""Operator actions interleaved with worker success, failure and crash, as a hypothesis
state machine against real Redis: each job ends in exactly one place.

The machine keeps a model of every entry it added (and of each replay, which is a new
entry whose ``replay_of`` is the old id) and drives:

- workers, simulated with the pieces ``Worker`` is made of: XREADGROUP ``>`` for new
  entries, ``reclaim_stale`` for stale ones (every pending entry, or only those an
  operator's Retry made due), and ``process_entry`` to settle a delivery with a handler
  that succeeds, fails or raises PermanentFailure. A crash is a worker dropping the
  deliveries it holds: they are never settled and stay pending;
- operators, through ``queue_core.services`` (retry, claim, dead-letter, acknowledge,
  replay, delete and purge from the DLQ) and ``queue_core.bulk`` (retry, dead-letter and
  acknowledge, by ids or by consumer, scoped to a snapshot).

Each step's result is checked against the model, and after every step Redis itself is
read back: every entry is in exactly one place (not yet delivered, pending with the
owner and delivery count the model expects, acked, in the DLQ exactly once, replayed
as a new entry, or deleted from the DLQ), never both pending and dead-lettered, and
never acked without a handler's success, an operator's acknowledge, or a dead-letter.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from queue_core import ActionRefused, Job, Outcome, PermanentFailure, process_entry, reclaim_stale
from queue_core.bulk import bulk_acknowledge, bulk_dead_letter, bulk_retry
from queue_core.keys import REPLAY_GROUP_FIELD, REPLAY_OF_FIELD, stream_keys
from queue_core.results import BulkOutcome
from queue_core.services import (
    dlq_delete,
    dlq_purge,
    dlq_replay,
    entry_acknowledge,
    entry_claim,
    entry_dead_letter,
    entry_retry,
)
from queue_core.validation import entry_id_key

T = TypeVar("T")

GROUP = "g"
WORKERS = ("w1", "w2", "w3")
OPERATOR = "ackboard-operator"
MAX_DELIVERIES = 3
#: A Retry makes an entry this idle; only a sweep with RECLAIM_DUE_MS takes it (real idle
#: times stay far below that while an example runs).
RETRY_IDLE_MS = 20 * 60_000
RECLAIM_DUE_MS = 10 * 60_000

#: Where an entry is. Exactly one of these, always.
NEW = "not yet delivered"
PENDING = "pending"
ACKED = "acked"
DLQ = "dead-lettered"
REPLAYED = "replayed"  # dead-lettered, then put back as a new entry
DELETED = "deleted"  # dead-lettered, then deleted from the DLQ by an operator
#: Places where the entry is no longer pending in the group (it was acked, one way or another).
SETTLED = {ACKED, REPLAYED, DELETED}


@dataclass
class Entry:
    id: str
    fields: dict[bytes, bytes]
    replay_of: str | None = None
    place: str = NEW
    owner: str = ""
    deliveries: int = 0
    #: An operator's Retry made it idle long enough for the "due" sweep; a delivery clears it.
    due: bool = False
    succeeded: bool = False
    operator_acked: bool = False
    dlq_id: str = ""


@dataclass
class Held:
    """A delivery a simulated worker holds and has not settled."""

    id: str
    fields: dict[bytes, bytes] | None
    count: int


@dataclass
class Model:
    entries: dict[str, Entry] = field(default_factory=dict)
    held: dict[str, list[Held]] = field(default_factory=lambda: {w: [] for w in WORKERS})
    failures: int = 0  # failed handler runs, each recorded in {S}:failures
    added: int = 0

    def ordered(self) -> list[Entry]:
        return sorted(self.entries.values(), key=lambda e: entry_id_key(e.id))

    def where(self, place: str) -> list[Entry]:
        return [e for e in self.ordered() if e.place == place]


def _pick(items: list[T], index: int) -> T:
    return items[index % len(items)]


class QueueMachine(RuleBasedStateMachine):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.r = redis.Redis.from_url(url, socket_timeout=10)
        self.stream = f"st{uuid.uuid4().hex[:10]}:jobs"
        self.keys = stream_keys(self.stream)
        self.r.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        self.model = Model()

    def teardown(self) -> None:
        self.r.delete(self.keys.stream, self.keys.dlq, self.keys.failures)
        self.r.close()

    # --- producers and workers ----------------------------------------------------------

    @rule(n=st.integers(1, 4))
    def add_jobs(self, n: int) -> None:
        for _ in range(n):
            self.model.added += 1
            fields = {b"n": str(self.model.added).encode()}
            entry_id = self.r.xadd(self.stream, fields).decode()
            self.model.entries[entry_id] = Entry(entry_id, fields)

    @rule(worker=st.sampled_from(WORKERS), count=st.integers(1, 4))
    def deliver(self, worker: str, count: int) -> None:
        """XREADGROUP ``>``: the oldest entries not yet delivered, each for the first time."""
        reply: Any = self.r.xreadgroup(GROUP, worker, {self.stream: ">"}, count=count)
        got = [(i.decode(), dict(f)) for i, f in reply[0][1]] if reply else []
        expected = self.model.where(NEW)[:count]
        assert [i for i, _ in got] == [e.id for e in expected]
        for (entry_id, fields), entry in zip(got, expected, strict=True):
            assert fields == entry.fields
            entry.place, entry.owner, entry.deliveries, entry.due = PENDING, worker, 1, False
            self.model.held[worker].append(Held(entry_id, fields, 1))

    def _take(self, worker: str, entry: Entry, fields: dict[bytes, bytes] | None) -> None:
        """``worker`` got ``entry`` again through a claim: one more delivery, idle reset."""
        entry.owner, entry.deliveries, entry.due = worker, entry.deliveries + 1, False
        held = self.model.held.get(worker)
        if held is not None:
            held[:] = [h for h in held if h.id != entry.id]
            held.append(Held(entry.id, fields, entry.deliveries))

    @rule(worker=st.sampled_from(WORKERS), due_only=st.booleans())
    def reclaim(self, worker: str, due_only: bool) -> None:
        """A reclaim sweep from 0-0: every pending entry (its owner is presumed dead), or
        only those an operator's Retry made due."""
        result = reclaim_stale(
            client=self.r,
            stream=self.stream,
            group=GROUP,
            consumer=worker,
            min_idle_ms=RECLAIM_DUE_MS if due_only else 0,
            count=1000,
        )
        expected = [e for e in self.model.where(PENDING) if e.due or not due_only]
        assert [d.id for d in result.deliveries] == [e.id for e in expected]
        assert result.deleted == ()
        for delivery, entry in zip(result.deliveries, expected, strict=True):
            assert delivery.delivery_count == entry.deliveries + 1
            assert delivery.fields == entry.fields
            self._take(worker, entry, delivery.fields)

    def _holding(self) -> list[str]:
        return [w for w in WORKERS if self.model.held[w]]

    @precondition(lambda self: self._holding())
    @rule(pick=st.integers(0, 10**6))
    def succeed(self, pick: int) -> None:
        """A worker's handler returns for one delivery it holds (which may be stale)."""
        self._settle(pick, "ok")

    @precondition(lambda self: self._holding())
    @rule(pick=st.integers(0, 10**6), permanent=st.booleans())
    def fail(self, pick: int, permanent: bool) -> None:
        """A worker's handler raises for one delivery it holds: an error, or PermanentFailure."""
        self._settle(pick, "permanent" if permanent else "fail")

    def _settle(self, pick: int, result: str) -> None:
        worker = _pick(self._holding(), pick)
        held = self.model.held[worker].pop(pick % len(self.model.held[worker]))
        entry = self.model.entries[held.id]
        ran: list[Job] = []

        def handler(job: Job) -> None:
            ran.append(job)
            if result == "fail":
                raise RuntimeError("boom")
            if result == "permanent":
                raise PermanentFailure("bad input")

        outcome = process_entry(
            client=self.r,
            stream=self.stream,
            group=GROUP,
            consumer=worker,
            entry_id=held.id,
            fields=held.fields,
            handler=handler,
            delivery_count=held.count,
            max_deliveries=MAX_DELIVERIES,
        )
        ours = entry.place == PENDING and entry.owner == worker
        if held.count > MAX_DELIVERIES:
            # Delivered too often without an outcome: dead-lettered without running,
            # but only by the consumer that owns it now.
            assert ran == []
            expected = Outcome.DEAD_LETTERED if ours else Outcome.NOT_PENDING
        else:
            assert [(j.id, j.delivery_count, j.consumer) for j in ran] == [
                (held.id, held.count, worker)
            ]
            if result == "ok":
                # XACK, whoever owns it now: the handler did succeed.
                expected = Outcome.ACKED
                entry.succeeded = True
                if entry.place == PENDING:
                    entry.place = ACKED
            else:
                self.model.failures += 1
                if result == "fail" and held.count < MAX_DELIVERIES:
                    expected = Outcome.FAILED
                else:
                    expected = Outcome.DEAD_LETTERED if ours else Outcome.NOT_PENDING
        assert outcome == expected, (entry, held, result)
        if outcome == Outcome.DEAD_LETTERED:
            entry.place = DLQ
            entry.dlq_id = self._dlq_id_of(entry.id)

    @precondition(lambda self: self._holding())
    @rule(pick=st.integers(0, 10**6))
    def crash(self, pick: int) -> None:
        """A worker dies: what it held is never settled and stays pending."""
        self.model.held[_pick(self._holding(), pick)].clear()

    # --- operators: one entry ---------------------------------------------------------

    def _any(self, pick: int) -> Entry:
        return _pick(self.model.ordered(), pick)

    @precondition(lambda self: self.model.entries)
    @rule(
        action=st.sampled_from(
            ["retry", "claim", "claim-stale-count", "claim-stale-owner", "dead-letter", "ack"]
        ),
        pick=st.integers(0, 10**6),
        pending_only=st.booleans(),
    )
    def operate(self, action: str, pick: int, pending_only: bool) -> None:
        """One operator action on one entry: a pending one, or any (most are refused)."""
        pending = self.model.where(PENDING)
        entry = _pick(pending, pick) if pending_only and pending else self._any(pick)
        if action == "retry":
            self._retry(entry)
        elif action.startswith("claim"):
            self._claim(
                entry, {"claim-stale-count": "deliveries", "claim-stale-owner": "owner"}.get(action)
            )
        elif action == "dead-letter":
            self._dead_letter(entry)
        else:
            self._acknowledge(entry)

    def _retry(self, entry: Entry) -> None:
        if entry.place != PENDING:
            with pytest.raises(ActionRefused):
                entry_retry(
                    client=self.r, stream=self.stream, group=GROUP, entry_id=entry.id,
                    idle_ms=RETRY_IDLE_MS,
                )  # fmt: skip
            return
        retried = entry_retry(
            client=self.r, stream=self.stream, group=GROUP, entry_id=entry.id,
            idle_ms=RETRY_IDLE_MS,
        )  # fmt: skip
        assert (retried.consumer, retried.deliveries) == (entry.owner, entry.deliveries)
        assert retried.idle_ms >= RETRY_IDLE_MS
        entry.due = True

    def _claim(self, entry: Entry, stale: str | None) -> None:
        """An operator claims what they saw: refused if it changed since they looked."""
        seen_deliveries = entry.deliveries + (stale == "deliveries")
        seen_consumer = "someone-else" if stale == "owner" else entry.owner or "nobody"

        def call() -> Any:
            return entry_claim(
                client=self.r, stream=self.stream, group=GROUP, entry_id=entry.id,
                consumer=OPERATOR, seen_idle_ms=0, seen_deliveries=seen_deliveries,
                seen_consumer=seen_consumer,
            )  # fmt: skip

        if entry.place != PENDING or stale:
            with pytest.raises(ActionRefused):
                call()
            return
        claimed = call()
        assert (claimed.previous_consumer, claimed.deliveries) == (
            entry.owner,
            entry.deliveries + 1,
        )
        self._take(OPERATOR, entry, None)

    def _dead_letter(self, entry: Entry) -> None:
        moved = entry_dead_letter(
            client=self.r, stream=self.stream, group=GROUP, entry_id=entry.id,
            reason="operator says so", operator="alice",
        )  # fmt: skip
        if entry.place != PENDING:
            assert moved is None
            return
        assert moved is not None and not moved.payload_missing
        assert (moved.consumer, moved.deliveries) == (entry.owner, entry.deliveries)
        entry.place, entry.dlq_id = DLQ, moved.dlq_id

    def _acknowledge(self, entry: Entry) -> None:
        done = entry_acknowledge(
            client=self.r, stream=self.stream, group=GROUP, entry_id=entry.id,
            reason="known bad",
        )  # fmt: skip
        assert done.was_pending == (entry.place == PENDING)
        if done.was_pending:
            assert (done.consumer, done.deliveries) == (entry.owner, entry.deliveries)
            entry.place, entry.operator_acked = ACKED, True

    # --- operators: the dead-letter stream ----------------------------------------------

    def _ever_dead_lettered(self) -> list[Entry]:
        return [e for e in self.model.ordered() if e.dlq_id]

    @precondition(lambda self: any(e.dlq_id for e in self.model.entries.values()))
    @rule(action=st.sampled_from(["replay", "delete", "purge", "purge-stale"]),
          pick=st.integers(0, 10**6))  # fmt: skip
    def dead_letters(self, action: str, pick: int) -> None:
        """One operator action on the DLQ: on an entry that is there, or was once."""
        in_dlq = self.model.where(DLQ)
        entry = _pick(in_dlq if in_dlq and pick % 4 else self._ever_dead_lettered(), pick)
        if action == "replay":
            self._replay(entry)
        elif action == "delete":
            self._delete(entry)
        else:
            self._purge(stale=action == "purge-stale")

    def _replay(self, entry: Entry) -> None:
        if entry.place != DLQ:
            with pytest.raises(ActionRefused):
                dlq_replay(client=self.r, stream=self.stream, dlq_id=entry.dlq_id)
            return
        replayed = dlq_replay(client=self.r, stream=self.stream, dlq_id=entry.dlq_id)
        assert (replayed.group, replayed.origin_id) == (GROUP, entry.id)
        fields = {
            **entry.fields,
            REPLAY_GROUP_FIELD.encode(): GROUP.encode(),
            REPLAY_OF_FIELD.encode(): entry.id.encode(),
        }
        entry.place = REPLAYED
        self.model.entries[replayed.new_id] = Entry(replayed.new_id, fields, replay_of=entry.id)

    def _delete(self, entry: Entry) -> None:
        deleted = dlq_delete(client=self.r, stream=self.stream, dlq_id=entry.dlq_id)
        assert deleted.deleted == (entry.place == DLQ)
        if deleted.deleted:
            assert (deleted.origin_group, deleted.origin_id) == (GROUP, entry.id)
            entry.place = DELETED

    def _purge(self, *, stale: bool) -> None:
        """Purge what the operator saw; refused if the DLQ changed since."""
        in_dlq = self.model.where(DLQ)
        newest = max((e.dlq_id for e in in_dlq), key=entry_id_key, default=None)
        expected_length = len(in_dlq) + stale
        if stale:
            with pytest.raises(ActionRefused):
                dlq_purge(
                    client=self.r, stream=self.stream, expected_length=expected_length,
                    newest_id=newest,
                )  # fmt: skip
            return
        purged = dlq_purge(
            client=self.r, stream=self.stream, expected_length=expected_length, newest_id=newest
        )
        assert purged.deleted == len(in_dlq)
        for entry in in_dlq:
            entry.place = DELETED

    # --- operators: bulk, scoped to a snapshot ------------------------------------------

    @precondition(lambda self: self.model.entries)
    @rule(
        action=st.sampled_from(["retry", "dead_letter", "acknowledge"]),
        picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=5),
        snapshot=st.integers(0, 10**6),
        by_consumer=st.sampled_from([None, *WORKERS, OPERATOR]),
    )
    def bulk(self, action: str, picks: list[int], snapshot: int, by_consumer: str | None) -> None:
        """By explicit ids, or by consumer: never past the snapshot the operator saw."""
        snapshot_id = self._any(snapshot).id
        limit = entry_id_key(snapshot_id)
        if by_consumer is None:
            ids = list(dict.fromkeys(self._any(p).id for p in picks))
            scope: dict[str, Any] = {"ids": ids}
        else:
            ids = [
                e.id
                for e in self.model.where(PENDING)
                if e.owner == by_consumer and entry_id_key(e.id) <= limit
            ]
            scope = {"consumer": by_consumer}
        common = {"client": self.r, "stream": self.stream, "group": GROUP}
        if action == "retry":
            result = bulk_retry(**common, snapshot_id=snapshot_id, idle_ms=RETRY_IDLE_MS, **scope)
        elif action == "dead_letter":
            result = bulk_dead_letter(
                **common, snapshot_id=snapshot_id, reason="bulk", operator="alice", **scope
            )
        else:
            result = bulk_acknowledge(**common, snapshot_id=snapshot_id, reason="bulk", **scope)
        assert result.complete
        outcomes = {item.entry_id: item for item in result.items}
        assert sorted(outcomes, key=entry_id_key) == sorted(ids, key=entry_id_key)
        for entry_id in ids:
            entry, item = self.model.entries[entry_id], outcomes[entry_id]
            if entry_id_key(entry_id) > limit:
                assert item.outcome == BulkOutcome.NEWER_THAN_SNAPSHOT
            elif entry.place != PENDING:
                assert item.outcome == BulkOutcome.NOT_PENDING
            else:
                assert item.outcome == BulkOutcome.DONE, item
                if action == "retry":
                    entry.due = True
                elif action == "dead_letter":
                    entry.place, entry.dlq_id = DLQ, item.new_id
                else:
                    entry.place, entry.operator_acked = ACKED, True

    # --- Redis, read back after every step ----------------------------------------------

    def _dlq_id_of(self, origin_id: str) -> str:
        found = [
            i.decode()
            for i, f in self.r.xrange(self.keys.dlq)
            if f[b"ackboard.origin-id"] == origin_id.encode()
        ]
        assert len(found) == 1, found
        return found[0]

    @invariant()
    def every_entry_is_in_exactly_one_place(self) -> None:
        on_stream = {i.decode(): f for i, f in self.r.xrange(self.keys.stream)}
        rows: Any = self.r.xpending_range(self.stream, GROUP, min="-", max="+", count=10_000)
        pending = {r["message_id"].decode(): r for r in rows}
        [group] = self.r.xinfo_groups(self.stream)
        delivered_up_to = entry_id_key(group["last-delivered-id"].decode())
        dlq: dict[str, list[tuple[str, dict[bytes, bytes]]]] = {}
        for dlq_id, fields in self.r.xrange(self.keys.dlq):
            origin = fields[b"ackboard.origin-id"].decode()
            dlq.setdefault(origin, []).append((dlq_id.decode(), fields))

        # Nothing leaves the stream (acks and dead-letters do not delete), nothing appears.
        assert set(on_stream) == set(self.model.entries)
        for entry in self.model.entries.values():
            assert on_stream[entry.id] == entry.fields
            in_pel = entry.id in pending
            in_dlq = entry.id in dlq
            undelivered = entry_id_key(entry.id) > delivered_up_to
            # Derived from Redis alone: exactly one place.
            redis_place = [
                p
                for p, here in (
                    (NEW, undelivered),
                    (PENDING, in_pel),
                    (DLQ, in_dlq),
                )
                if here
            ]
            assert len(redis_place) <= 1, (entry, redis_place)
            if entry.place in SETTLED:
                assert redis_place == [], (entry, redis_place)
                # Acked only after a success, an operator's acknowledge, or a dead-letter.
                assert entry.succeeded or entry.operator_acked or entry.dlq_id, entry
            else:
                assert redis_place == [entry.place], (entry, redis_place)
            if in_pel:
                row = pending[entry.id]
                assert (row["consumer"].decode(), row["times_delivered"]) == (
                    entry.owner,
                    entry.deliveries,
                ), entry
            if in_dlq:
                [(dlq_id, fields)] = dlq[entry.id]  # one copy, never two
                assert dlq_id == entry.dlq_id
                assert fields[b"ackboard.origin-group"] == GROUP.encode()
                # The original payload travels with it.
                assert {k: v for k, v in fields.items() if not k.startswith(b"ackboard.")} == {
                    k: v for k, v in entry.fields.items() if not k.startswith(b"ackboard.")
                }
        assert set(dlq) <= set(self.model.entries)
        assert set(pending) <= set(self.model.entries)
        # Every failed handler run is on record.
        assert self.r.xlen(self.keys.failures) == self.model.failures


class StatefulTests:
    def test_operator_and_worker_actions_leave_every_job_in_exactly_one_place(
        self, redis_url: str
    ) -> None:
        run_state_machine_as_test(
            lambda: QueueMachine(redis_url),
            settings=settings(
                max_examples=100,
                stateful_step_count=50,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
