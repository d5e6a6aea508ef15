"""The database tests on PostgreSQL, inside the one ``uv run pytest``.

Django fixes ``DATABASES`` once per process, so this test starts a private PostgreSQL
(tests/postgres_server.py: initdb in a temp dir, pg_ctl on a free loopback port) and runs
the failure-index, audit, failure-search, migration and engine tests in a child pytest
with ``ACKBOARD_TEST_DB=postgres`` pointed at it. It passes only when that run passed, ran
a non-trivial number of tests, skipped none, and ran them on PostgreSQL.

Cost: ~1–3 s to initdb and start, plus the child run (~30 s on 2 cores).

By hand: ``ACKBOARD_TEST_DB=postgres uv run pytest tests/dashboard/test_audit.py`` (the
settings then start and stop a private server of their own).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import psycopg
import pytest

from tests.postgres_server import PostgresServer, postgres_bin_dir

ROOT = Path(__file__).resolve().parents[2]

#: The tests that exercise SQL, relative to the project root.
DATABASE_TESTS = (
    "tests/dashboard/failure_index",
    "tests/dashboard/test_audit.py",
    "tests/dashboard/test_failure_search.py",
    "tests/dashboard/test_causes.py",
    "tests/dashboard/test_migrations.py",
    "tests/dashboard/test_databases.py",
)
ENGINE_TEST = "test_engine_is_the_one_the_run_asked_for"
#: Fewer than this many tests in the child run means it did not run what it should.
MIN_TESTS = 50


class PostgresServerTests:
    def test_binaries_are_found_off_path_where_debian_puts_them(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # apt-get install postgresql leaves initdb/pg_ctl in /usr/lib/postgresql/<v>/bin.
        monkeypatch.setenv("PATH", "/usr/bin:/bin")
        found = postgres_bin_dir()
        assert found is not None, "no /usr/lib/postgresql/<v>/bin: .ci/run installs it"
        assert found.parent.parent == Path("/usr/lib/postgresql")
        assert (found / "initdb").is_file() and (found / "pg_ctl").is_file()

    def test_private_server_has_its_own_database_on_loopback(
        self, postgres: PostgresServer
    ) -> None:
        assert postgres.port != 5432
        with psycopg.connect(postgres.url, connect_timeout=10) as conn:
            row = conn.execute("SELECT current_database(), inet_server_port()").fetchone()
        assert row == ("ackboard", postgres.port)
        assert postgres.version.split(".")[0].isdigit()

    def test_cleanup_stops_the_server_and_removes_its_dir(self) -> None:
        server = PostgresServer().start()
        workdir = server.workdir
        assert workdir is not None and (workdir / "data" / "postmaster.pid").exists()
        server.cleanup()
        assert not workdir.exists()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.url, connect_timeout=2).close()


class DatabaseTestsOnPostgresTests:
    @pytest.mark.timeout(600)
    def test_database_tests_pass_on_postgres(
        self, postgres: PostgresServer, tmp_path: Path
    ) -> None:
        junit = tmp_path / "junit.xml"
        env = {
            **os.environ,
            "ACKBOARD_TEST_DB": "postgres",
            "ACKBOARD_TEST_DATABASE_URL": postgres.url,
        }
        command = [
            sys.executable, "-m", "pytest", *DATABASE_TESTS, "-q", "-n", "0",
            f"--junitxml={junit}",
        ]  # fmt: skip
        proc = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=570,
            check=False,
        )
        output = (proc.stdout + proc.stderr)[-6000:]
        assert proc.returncode == 0, output
        suite = ET.parse(junit).getroot()
        if suite.tag == "testsuites":
            suite = suite[0]
        counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
        assert counts["tests"] >= MIN_TESTS, (counts, output)
        assert counts["failures"] == counts["errors"] == counts["skipped"] == 0, counts
        # The child ran on PostgreSQL: its engine test passed under ACKBOARD_TEST_DB=postgres.
        [engine_case] = [c for c in suite.iter("testcase") if c.get("name") == ENGINE_TEST]
        assert len(engine_case) == 0, ET.tostring(engine_case, encoding="unicode")
