"""Chaos at scale: 10,000 jobs through real ``manage.py queue_worker`` processes while
workers are SIGKILLed and Redis itself is SIGKILLed and restarted.

Run it with ``uv run pytest -m chaos -s`` (``-s`` shows the figures it prints). It runs on
Redis 7 only (a minute of the suite's time); ``ACKBOARD_TEST_ENGINE=valkey`` runs it on
Valkey.

- Its own redis-server with ``--appendonly yes --appendfsync always``: a write Redis has
  answered survives the SIGKILL, so the restart may lose replies in flight (an XACK the
  worker never hears back about) but no state.
- 4 workers (``--min-idle-ms 1500``), each SIGKILLed victim replaced by a new process with
  a new consumer name. The kills and the Redis restart are spread by progress (share of
  jobs done), not by the clock, so a busy machine slows the run without bunching them.
- The fate of every job is in its payload (``tests/integration/chaos_handlers.py``): 1%
  poison (fails every time), 10% flaky (fails until delivery 2 or 3), the rest succeed.
  Handlers record each run in files outside Redis, so the accounting does not depend on
  the server being killed.

After the drain every id is accounted for against the ack contract (docs/ack-contract.md):
processed, dead-lettered or pending, with nothing lost.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from queue_core.keys import stream_keys
from tests.redis_server import RedisServer
from tests.waiting import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.one_engine, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]

N_JOBS = 10_000
N_WORKERS = 4
POISON = N_JOBS // 100  # 1%
FLAKY = N_JOBS // 10  # 10%
MAX_DELIVERIES = 5
MIN_IDLE_MS = 1500
HANDLER_MS = 20
CONCURRENCY = 2
#: Progress (share of jobs that succeeded) at which a worker is SIGKILLed...
WORKER_KILLS_AT = (0.03, 0.11, 0.19, 0.27, 0.35, 0.43, 0.60, 0.68, 0.76, 0.86)
#: ...and at which Redis is SIGKILLed, kept down for REDIS_DOWN_S, and restarted.
REDIS_KILL_AT = 0.52
REDIS_DOWN_S = 1.0
#: Fixes which jobs are poison or flaky and which worker each kill picks; timing still varies.
SEED = 8
STREAM = "chaos:jobs"
GROUP = "chaos"

_RECLAIMED = re.compile(r"reclaimed (\d+) stale entries")
_XACK_FAILED = re.compile(r"XACK of (\d+) entries of .* failed")
_OVER_MAX = "without an outcome"
_FAILED_AT_MAX = re.compile(r"\Ahandler failed on delivery (\d+) of max (\d+)\Z")


@dataclass
class Job:
    n: int
    kind: str  # ok | flaky | poison
    succeed_at: int = 1


@dataclass
class Pool:
    """The worker processes: started, SIGKILLed and replaced, stopped at the end."""

    url: str
    logs: Path
    sink: Path
    rng: random.Random
    started: int = 0
    live: list[tuple[subprocess.Popen[bytes], float, str]] = field(default_factory=list)
    killed: list[subprocess.Popen[bytes]] = field(default_factory=list)
    every: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("REDIS_URL", None)
        env.update(
            VALKEY_URL=self.url,
            # Workers need no database: one that cannot be opened proves it.
            DATABASE_URL="sqlite:////nonexistent-dir/ackboard-no-db.sqlite3",
            CHAOS_SINK_DIR=str(self.sink),
            CHAOS_HANDLER_MS=str(HANDLER_MS),
        )
        return env

    def start(self) -> None:
        self.started += 1
        consumer = f"chaos-w{self.started}"
        with open(self.logs / f"{consumer}.log", "wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable, str(ROOT / "manage.py"), "queue_worker",
                    "--stream", STREAM, "--group", GROUP,
                    "--handler", "tests.integration.chaos_handlers:handle",
                    "--consumer", consumer, "--concurrency", str(CONCURRENCY),
                    "--block-ms", "500", "--min-idle-ms", str(MIN_IDLE_MS),
                    "--reclaim-interval-ms", "300", "--max-deliveries", str(MAX_DELIVERIES),
                    "--group-start", "0", "--grace-seconds", "10",
                ],
                cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.live.append((proc, time.monotonic(), consumer))
        self.every.append(proc)

    def wait_ready(self) -> None:
        """Until every live worker has connected and created or found its group.

        A worker that cannot reach Redis at startup exits 2 (docs/worker.md: bad configuration),
        so none is left starting when Redis is killed; a supervisor would restart it.
        """
        for proc, _, consumer in self.live:
            log = self.logs / f"{consumer}.log"
            wait_until(
                lambda proc=proc, log=log: (
                    proc.poll() is not None or b" consuming " in log.read_bytes()
                ),
                timeout=60,
                what=f"worker {proc.pid} to start",
            )
            assert proc.poll() is None, log.read_text(errors="replace")[-2000:]

    def kill_one(self) -> None:
        """SIGKILL one worker that has been up a while (so it holds work), start another."""
        settled = [item for item in self.live if time.monotonic() - item[1] > 1.5]
        victim = self.rng.choice(settled or self.live)
        self.live.remove(victim)
        proc = victim[0]
        assert proc.poll() is None, f"worker {proc.pid} died on its own: {proc.returncode}"
        proc.kill()
        proc.wait(10)
        self.killed.append(proc)
        self.start()

    def stop(self) -> list[int | None]:
        """SIGTERM the live workers; their exit codes (0 = a clean, graceful stop)."""
        for proc, _, _ in self.live:
            proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for proc, _, _ in self.live:
            try:
                codes.append(proc.wait(30))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes

    def kill_all(self) -> None:
        for proc in self.every:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def client_of(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=10)


def seed_jobs(r: redis.Redis, rng: random.Random) -> dict[str, Job]:
    """XADD the jobs with their fate in the payload; map entry id -> Job."""
    order = list(range(N_JOBS))
    rng.shuffle(order)
    fates: dict[int, Job] = {n: Job(n, "ok") for n in range(N_JOBS)}
    for n in order[:POISON]:
        fates[n] = Job(n, "poison")
    for n in order[POISON : POISON + FLAKY]:
        fates[n] = Job(n, "flaky", succeed_at=rng.choice((2, 3)))
    r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    jobs: dict[str, Job] = {}
    for start in range(0, N_JOBS, 1000):
        pipe = r.pipeline(transaction=False)
        batch = [fates[n] for n in range(start, min(N_JOBS, start + 1000))]
        for job in batch:
            pipe.xadd(STREAM, {"n": job.n, "kind": job.kind, "succeed_at": job.succeed_at})
        for entry_id, job in zip(pipe.execute(), batch, strict=True):
            jobs[entry_id.decode()] = job
    return jobs


def sink_lines(sink: Path) -> list[list[str]]:
    """Every recorded run: ``[outcome, entry id, delivery count, consumer]``."""
    lines: list[list[str]] = []
    for path in sorted(sink.glob("runs-*.log")):
        lines.extend(line.split() for line in path.read_text().splitlines())
    return lines


def succeeded_so_far(sink: Path) -> int:
    return sum(path.read_bytes().count(b"ok ") for path in sink.glob("runs-*.log"))


def drained(r: redis.Redis) -> bool:
    try:
        [group] = r.xinfo_groups(STREAM)
        info: Any = r.xinfo_stream(STREAM)
    except redis.RedisError:
        return False
    return bool(group["pending"] == 0 and group["last-delivered-id"] == info["last-generated-id"])


def log_totals(logs: Path) -> tuple[int, int]:
    """(entries reclaimed, entries whose XACK failed) over every worker's log."""
    reclaimed = acks_failed = 0
    for path in logs.glob("*.log"):
        text = path.read_text(errors="replace")
        reclaimed += sum(int(m) for m in _RECLAIMED.findall(text))
        acks_failed += sum(int(m) for m in _XACK_FAILED.findall(text))
    return reclaimed, acks_failed


class ChaosTests:
    def test_every_job_is_accounted_for_after_worker_and_redis_kills(
        self, aof_server: RedisServer, tmp_path: Path
    ) -> None:
        began = time.monotonic()
        rng = random.Random(SEED)
        r = client_of(aof_server)
        jobs = seed_jobs(r, rng)
        assert len(jobs) == N_JOBS
        logs, sink = tmp_path / "logs", tmp_path / "sink"
        logs.mkdir()
        sink.mkdir()
        pool = Pool(url=aof_server.url, logs=logs, sink=sink, rng=rng)
        events = sorted([(at, "worker") for at in WORKER_KILLS_AT] + [(REDIS_KILL_AT, "redis")])
        stream_after_restart = -1
        try:
            for _ in range(N_WORKERS):
                pool.start()
            for at, what in events:
                wait_until(
                    lambda at=at: succeeded_so_far(sink) >= at * N_JOBS,
                    timeout=90,
                    what=f"{at:.0%} of the jobs to succeed (before the {what} kill)",
                )
                pool.wait_ready()
                if what == "worker":
                    pool.kill_one()
                else:
                    aof_server.kill()
                    time.sleep(REDIS_DOWN_S)  # the outage: Redis is down this long
                    aof_server.start()
                    r = client_of(aof_server)
                    stream_after_restart = r.xlen(STREAM)
            wait_until(lambda: drained(r), timeout=150, what="the group to drain", interval=0.1)
            drain_s = time.monotonic() - began
            # A worker still importing Django has no signal handler yet: SIGTERM would
            # end it (-15) before it could stop gracefully.
            pool.wait_ready()
            exit_codes = pool.stop()
        finally:
            pool.kill_all()

        # --- gather: the handlers' own record, and Redis's state after the drain ----------
        runs = sink_lines(sink)
        ok_runs: Counter[str] = Counter()
        failed_runs: Counter[str] = Counter()
        failed_at: defaultdict[str, set[int]] = defaultdict(set)
        late_ok = 0  # successes of always-ok jobs on a redelivery: crash or outage recovery
        for outcome, entry_id, delivery, _consumer in runs:
            if outcome == "ok":
                ok_runs[entry_id] += 1
                late_ok += jobs[entry_id].kind == "ok" and int(delivery) > 1
            else:
                failed_runs[entry_id] += 1
                failed_at[entry_id].add(int(delivery))
        dlq: defaultdict[str, list[dict[str, str]]] = defaultdict(list)
        for _, raw in r.xrange(stream_keys(STREAM).dlq):
            fields = {k.decode(): v.decode() for k, v in raw.items()}
            dlq[fields["ackboard.origin-id"]].append(fields)
        pending_rows: Any = r.xpending_range(STREAM, GROUP, min="-", max="+", count=N_JOBS)
        pending = {row["message_id"].decode() for row in pending_rows}
        on_stream = {entry_id.decode() for entry_id, _ in r.xrange(STREAM)}
        reclaimed, acks_failed = log_totals(logs)

        ids = set(jobs)
        poison = {i for i, job in jobs.items() if job.kind == "poison"}
        processed = set(ok_runs)
        dead_lettered = set(dlq)
        lost = ids - processed - dead_lettered - pending
        both = processed & dead_lettered
        ran_twice = {i for i, count in ok_runs.items() if count > 1}
        dlq_twice = {i for i, copies in dlq.items() if len(copies) > 1}
        not_poison_dlq = dead_lettered - poison
        print(
            f"\nchaos: {N_JOBS} jobs, {N_WORKERS} worker processes, "
            f"{len(pool.killed)} worker SIGKILLs, 1 Redis SIGKILL + restart (appendfsync always)\n"
            f"  poison / flaky / ok jobs            {len(poison)} / "
            f"{sum(j.kind == 'flaky' for j in jobs.values())} / "
            f"{sum(j.kind == 'ok' for j in jobs.values())}\n"
            f"  processed (handler succeeded)       {len(processed)}\n"
            f"  dead-lettered                       {len(dead_lettered)} "
            f"(poison {len(dead_lettered & poison)}, other {len(not_poison_dlq)})\n"
            f"  pending after the drain             {len(pending)}\n"
            f"  lost                                {len(lost)}\n"
            f"  succeeded and dead-lettered         {len(both)}\n"
            f"  succeeded more than once            {len(ran_twice)}\n"
            f"  dead-lettered more than once        {len(dlq_twice)}\n"
            f"  handler runs (ok / failed)          {sum(ok_runs.values())} / "
            f"{sum(failed_runs.values())}\n"
            f"  entries reclaimed (worker logs)     {reclaimed}\n"
            f"  entries whose XACK failed (logs)    {acks_failed}\n"
            f"  drained after                       {drain_s:.1f} s"
        )

        # --- the contract ---------------------------------------------------------------
        # Nothing vanished from the stream, across the Redis restart either, and nothing
        # was added to it (no replays here).
        assert stream_after_restart == N_JOBS
        assert on_stream == ids
        # Every id is processed, dead-lettered or pending; after the drain none is pending.
        assert lost == set()
        assert pending == set()
        # Every poison job is in the DLQ exactly once; no id is
        # dead-lettered twice ("doing it twice leaves one copy").
        assert {i for i in poison if len(dlq.get(i, [])) != 1} == set()
        assert dlq_twice == set()
        for origin_id, [fields] in ((i, dlq[i]) for i in dead_lettered):
            job = jobs[origin_id]
            # The original payload travels with it.
            assert (fields["n"], fields["kind"]) == (str(job.n), job.kind)
            reason, deliveries = fields["ackboard.reason"], int(fields["ackboard.deliveries"])
            # Never dead-lettered before max deliveries.
            assert deliveries >= MAX_DELIVERIES, (origin_id, fields)
            failed = _FAILED_AT_MAX.match(reason)
            if failed:
                # "failed on delivery N": a run really failed on that delivery, the last.
                assert int(failed[1]) == MAX_DELIVERIES == int(failed[2]), (origin_id, reason)
                assert MAX_DELIVERIES in failed_at[origin_id], (origin_id, reason)
            else:
                # Otherwise only because it was delivered too often without an outcome
                # (crashes and lost acks): the only way a job that can succeed gets here.
                assert _OVER_MAX in reason and deliveries > MAX_DELIVERIES, (origin_id, reason)
        # Graceful stop of the survivors: exit 0. The kills really happened.
        assert exit_codes == [0] * N_WORKERS, [
            (code, (logs / f"{consumer}.log").read_text(errors="replace")[-3000:])
            for code, (_, _, consumer) in zip(exit_codes, pool.live, strict=True)
            if code != 0
        ]
        assert [p.returncode for p in pool.killed] == [-signal.SIGKILL] * len(WORKER_KILLS_AT)
        # Crash recovery was exercised: always-ok jobs succeeded on a redelivery.
        assert late_ok > 0 and reclaimed > 0
