"""The key-name upgrade: hash-tagged streams' old companions move under the marker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

from queue_core.keys import stream_keys
from queue_core.migrate import legacy_companions_find, legacy_companions_rename

ROOT = Path(__file__).resolve().parents[2]


def _old_layout(r: redis.Redis, prefix: str) -> tuple[str, str]:
    """A tagged stream with both companions under the pre-marker names."""
    stream = "{" + prefix + "t}orders"
    r.xadd(stream, {"n": "1"})
    r.xadd(stream + ":dlq", {"ackboard.origin-id": "1-0"})
    r.xadd(stream + ":failures", {"error_type": "E"})
    return stream, "{" + prefix + "t}"


class LegacyCompanionsTests:
    def test_dry_run_lists_the_moves_and_changes_nothing(self, r: redis.Redis, prefix: str) -> None:
        stream, _ = _old_layout(r, prefix)
        r.xadd(prefix + "plain", {"n": "1"})
        r.xadd(stream_keys(prefix + "plain").dlq, {"x": "1"})  # untagged: current already
        moves = [m for m in legacy_companions_find(client=r) if m.old.startswith("{" + prefix)]
        assert {(m.old, m.new) for m in moves} == {
            (stream + ":dlq", stream_keys(stream).dlq),
            (stream + ":failures", stream_keys(stream).failures),
        }
        assert r.exists(stream + ":dlq", stream + ":failures") == 2

    def test_apply_renames_and_never_overwrites(self, r: redis.Redis, prefix: str) -> None:
        stream, _ = _old_layout(r, prefix)
        r.xadd(stream_keys(stream).failures, {"already": "here"})
        moves = [m for m in legacy_companions_find(client=r) if m.old.startswith("{" + prefix)]
        lines = legacy_companions_rename(client=r, moves=moves)
        assert r.xlen(stream_keys(stream).dlq) == 1 and not r.exists(stream + ":dlq")
        assert r.exists(stream + ":failures")  # the new key existed: left for a person
        assert any(line.startswith("NOT renamed") for line in lines)
        assert r.xrange(stream_keys(stream).failures)[0][1] == {b"already": b"here"}

    def test_whole_name_tag_is_reported_not_moved(self, r: redis.Redis, prefix: str) -> None:
        # Stream "{S}" used "{S}:dlq", which is now the companion of stream "S".
        whole = "{" + prefix + "w}"
        r.xadd(whole, {"n": "1"})
        r.xadd(whole + ":dlq", {"x": "1"})
        [move] = [m for m in legacy_companions_find(client=r) if m.old == whole + ":dlq"]
        assert move.new is None and "by hand" in move.note
        legacy_companions_rename(client=r, moves=[move])
        assert r.exists(whole + ":dlq")

    @pytest.mark.one_engine  # the command's flags; the renames run on every engine above
    def test_command_is_a_dry_run_unless_told(
        self, r: redis.Redis, redis_url: str, prefix: str
    ) -> None:
        stream, _ = _old_layout(r, prefix)
        env = {"PATH": "/usr/bin:/bin", "REDIS_URL": redis_url}
        run = [sys.executable, "manage.py", "rename_companions"]
        dry = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, dry.stderr
        assert f"would rename {stream + ':dlq'!r}" in dry.stdout
        assert r.exists(stream + ":dlq")
        done = subprocess.run([*run, "--apply"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert r.xlen(stream_keys(stream).dlq) == 1 and not r.exists(stream + ":dlq")
