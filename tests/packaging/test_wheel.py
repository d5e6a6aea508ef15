"""The worker library as a wheel: what it holds, what it requires, and a worker run from it.

The wheel is built from this checkout and installed into a fresh virtual environment with
nothing else (tests/packaging/conftest.py). There, ``foreign_loop.py`` (a plain redis-py
loop that imports only the installed ``queue_core``) works a group against the suite's
private Redis while the test sets and clears a pause; the test then reads Redis: the
failure records, the dead letter, nothing pending, the heartbeats. ``own_worker.py`` runs
Ackboard's own ``Worker`` there, without the ``hiredis`` extra.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import redis

import queue_core
from queue_core.control import Heartbeat, Pause, heartbeats_read, pause_clear, pause_set
from queue_core.keys import ORIGIN_ID_FIELD, stream_keys
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
GROUP = "billing"
CONSUMER = "foreign-1"


def metadata_of(wheel: Path) -> list[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(name).decode())
    return [(key, str(value)) for key, value in message.items()]


def run_in(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in the wheel's environment, isolated from this checkout (``-I``, a temp cwd)."""
    return subprocess.run([str(python), "-I", "-c", code], cwd=python.parent, text=True,
                          capture_output=True, timeout=30)  # fmt: skip


class WheelContentsTests:
    def test_it_holds_queue_core_with_its_scripts_and_nothing_else(self, wheel: Path) -> None:
        with zipfile.ZipFile(wheel) as archive:
            names = {n for n in archive.namelist() if not n.endswith("/")}
        source = {
            path.relative_to(ROOT).as_posix()
            for path in (ROOT / "queue_core").rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        }
        assert {"queue_core/py.typed", "queue_core/scripts/dead_letter.lua"} <= source
        assert {n for n in names if not n.startswith("ackboard-")} == source

    def test_its_only_requirement_is_redis_with_hiredis_an_extra(self, wheel: Path) -> None:
        with (ROOT / "pyproject.toml").open("rb") as f:
            dependencies = tomllib.load(f)["project"]["dependencies"]
        fields = metadata_of(wheel)
        requires = [value for key, value in fields if key == "Requires-Dist"]
        assert [req for req in requires if "extra ==" not in req] == dependencies
        assert [dep.split(">")[0] for dep in dependencies] == ["redis"]
        assert "redis[hiredis] ; extra == 'hiredis'" in requires
        assert ("Provides-Extra", "hiredis") in fields


class WheelEnvironmentTests:
    def test_only_the_wheel_and_redis_are_installed(self, wheel_python: Path) -> None:
        done = run_in(wheel_python, "import importlib.metadata as m; "
                      "print(sorted(d.metadata['Name'] for d in m.distributions()))")  # fmt: skip
        assert done.stdout.strip() == "['ackboard', 'redis']", done.stderr

    def test_django_cannot_be_imported(self, wheel_python: Path) -> None:
        done = run_in(wheel_python, "import django")
        assert done.returncode == 1 and "No module named 'django'" in done.stderr

    def test_the_public_api_imports_from_the_installed_wheel(self, wheel_python: Path) -> None:
        code = (
            "import queue_core, sys; print(queue_core.__version__, len(queue_core.__all__), "
            "'django' in sys.modules, queue_core.__file__)"
        )
        version, count, django_loaded, path = run_in(wheel_python, code).stdout.split()
        assert (version, int(count), django_loaded) == (
            queue_core.__version__,
            len(queue_core.__all__),
            "False",
        )
        assert Path(path).is_relative_to(wheel_python.parents[1])  # the venv, not the checkout

    def test_a_foreign_loop_records_dead_letters_and_honours_a_pause(
        self, wheel_python: Path, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
    ) -> None:
        stream = prefix + "jobs"
        r.xgroup_create(stream, GROUP, id="0", mkstream=True)
        pause = pause_set(client=r, stream=stream, group=GROUP, by="ops", reason="deploy",
                          until_ms=None, now_ms=int(time.time() * 1000))  # fmt: skip
        ids = {kind: r.xadd(stream, {"job": kind, "kind": kind.rstrip("12")}).decode()
               for kind in ("ok1", "flaky", "poison", "ok2")}  # fmt: skip
        script = shutil.copy(Path(__file__).with_name("foreign_loop.py"), tmp_path)
        argv = [str(wheel_python), "-I", str(script), "--url", redis_url, "--stream", stream,
                "--group", GROUP, "--consumer", CONSUMER, "--max-deliveries", "2"]  # fmt: skip
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            confirmed = self._wait_for_confirmation(r, stream, pause, proc)
            # Confirmed: it read nothing while paused (nothing delivered, nothing pending).
            group = r.xinfo_groups(stream)[0]
            assert (group["last-delivered-id"], group["pending"]) == (b"0-0", 0)
            assert confirmed.running == confirmed.buffered == 0
            pause_clear(client=r, stream=stream, group=GROUP)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err
        summary = json.loads(out.splitlines()[-1])
        assert Path(summary.pop("queue_core")).is_relative_to(wheel_python.parents[1])
        assert summary.pop("django_loaded") is False
        assert summary.pop("paused_passes") >= 2
        assert summary == {"acked": 3, "failed": 2, "dead_lettered": 1,
                           "version": confirmed.version}  # fmt: skip

        keys = stream_keys(stream)
        records = [{k.decode(): v.decode() for k, v in fields.items()}
                   for _, fields in r.xrange(keys.failures)]  # fmt: skip
        assert sorted((rec["entry_id"], rec["attempt"], rec["error_type"], rec["consumer"])
                      for rec in records) == sorted([
            (ids["flaky"], "1", "ConnectionError", CONSUMER),
            (ids["poison"], "1", "ValueError", CONSUMER),
            (ids["poison"], "2", "ValueError", CONSUMER),
        ])  # fmt: skip
        assert all("Traceback" in rec["traceback"] for rec in records)
        letters = r.xrange(keys.dlq)
        assert len(letters) == 1
        assert letters[0][1][b"job"] == b"poison"
        assert letters[0][1][ORIGIN_ID_FIELD.encode()] == ids["poison"].encode()
        assert r.xpending(stream, GROUP)["pending"] == 0  # every failure was settled, none acked
        (last,) = heartbeats_read(client=r, stream=stream, group=GROUP)
        assert (last.consumer, last.stopped, last.paused) == (CONSUMER, True, False)
        assert (last.processed, last.failed) == (4, 2)

    def test_ackboards_worker_runs_from_the_wheel_without_hiredis(
        self, wheel_python: Path, r: redis.Redis, redis_url: str, prefix: str, tmp_path: Path
    ) -> None:
        stream = prefix + "orders"
        for n in range(20):
            r.xadd(stream, {"job": str(n), "kind": "poison" if n == 7 else "ok"})
        script = shutil.copy(Path(__file__).with_name("own_worker.py"), tmp_path)
        argv = [str(wheel_python), "-I", str(script), "--url", redis_url, "--stream", stream,
                "--group", GROUP, "--consumer", "own-1"]  # fmt: skip
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[-1]) == {
            "acked": 19, "dead_lettered": 1, "failed": 1,
            "hiredis_loaded": False, "django_loaded": False,
        }  # fmt: skip
        assert r.xpending(stream, GROUP)["pending"] == 0
        (letter,) = r.xrange(stream_keys(stream).dlq)
        assert letter[1][b"job"] == b"7"

    @staticmethod
    def _wait_for_confirmation(
        r: redis.Redis, stream: str, pause: Pause, proc: subprocess.Popen[str]
    ) -> Heartbeat:
        """The loop's first heartbeat that confirms ``pause``; fails after 20 s."""

        def confirming() -> Heartbeat | None:
            if proc.poll() is not None:
                raise AssertionError(f"the loop exited while paused: {proc.communicate()}")
            for beat in heartbeats_read(client=r, stream=stream, group=GROUP):
                if beat.consumer == CONSUMER and beat.confirms(pause):
                    return beat
            return None

        beat: Heartbeat = wait_until(confirming, timeout=20, interval=0.05,
                                     what="the loop's heartbeat confirming the pause")  # fmt: skip
        return beat
