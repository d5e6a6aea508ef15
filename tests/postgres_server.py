"""Start and stop a private PostgreSQL for tests and benchmarks, the way tests start Redis.

``initdb`` in a fresh temp dir, ``pg_ctl start`` on a free loopback port (Unix socket in
the same dir), one database created for the caller, and ``pg_ctl stop`` plus the dir's
removal at the end. It never connects to a server it did not start: the only address
it uses is its own ``127.0.0.1:<port>``, so a PostgreSQL on :5432 is never touched.

Binaries: ``initdb`` and ``pg_ctl`` on PATH, else the newest
``/usr/lib/postgresql/<v>/bin`` (where Debian's ``postgresql`` package puts them, off
PATH). PostgreSQL refuses to run as root, so under root the server runs as the
``postgres`` user (or ``nobody``), which then owns the temp dir.

Cost: initdb ~1–2 s, start ~0.3 s. ``durable=False`` (tests) turns off fsync and
synchronous commit; benchmarks keep the defaults.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.redis_server import free_port

HOW_TO_GET_ONE = (
    "no PostgreSQL binaries (initdb, pg_ctl): install them (Debian: apt-get install "
    "postgresql, which puts them in /usr/lib/postgresql/<version>/bin; macOS: brew install "
    "postgresql), or put initdb and pg_ctl on PATH."
)


class PostgresUnavailable(RuntimeError):
    pass


def postgres_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: PATH first, then Debian's layout."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return Path(os.path.realpath(initdb)).parent
    versions = glob.glob("/usr/lib/postgresql/*/bin/initdb")

    def major(path: str) -> int:
        name = Path(path).parent.parent.name
        return int(name) if name.isdigit() else 0

    for candidate in sorted(versions, key=major, reverse=True):
        bin_dir = Path(candidate).parent
        if (bin_dir / "pg_ctl").is_file():
            return bin_dir
    return None


def _run_as() -> str | None:
    """The user to run the server as: None when not root, else postgres (or nobody)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise PostgresUnavailable("running as root and there is no postgres or nobody user")


@dataclass
class PostgresServer:
    """A private PostgreSQL in its own temp dir on a loopback port, with one database."""

    database: str = "ackboard"
    user: str = "ackboard"
    durable: bool = False
    port: int = field(default_factory=free_port)
    password: str = field(default_factory=lambda: secrets.token_hex(16))
    workdir: Path | None = None
    bin_dir: Path | None = None
    version: str = ""
    _started: bool = False
    _options: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"postgres://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    @property
    def data_dir(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "data"

    def start(self, timeout: float = 60.0) -> PostgresServer:
        self.bin_dir = self.bin_dir or postgres_bin_dir()
        if self.bin_dir is None:
            raise PostgresUnavailable(HOW_TO_GET_ONE)
        run_as = _run_as()
        self.workdir = Path(tempfile.mkdtemp(prefix="ackboard-postgres-"))
        if run_as is not None:
            entry = pwd.getpwnam(run_as)
            os.chown(self.workdir, entry.pw_uid, entry.pw_gid)
        pwfile = self.workdir / "pwfile"
        pwfile.write_text(self.password + "\n")
        if run_as is not None:
            os.chown(pwfile, pwd.getpwnam(run_as).pw_uid, -1)
        try:
            self._run(
                run_as,
                "initdb",
                "-D", str(self.data_dir),
                "-U", self.user,
                f"--pwfile={pwfile}",
                "--auth-local=scram-sha-256",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                timeout=timeout,
            )  # fmt: skip
            pwfile.unlink()
            self._options = options = [
                f"-p {self.port}",
                "-h 127.0.0.1",
                f"-k {self.workdir}",  # the Unix socket stays in the temp dir
                "-c max_connections=100",
            ]
            if not self.durable:
                options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
            self._pg_ctl_start(run_as, timeout)
            self._create_database()
        except BaseException:
            self.cleanup()
            raise
        return self

    def _pg_ctl_start(self, run_as: str | None, timeout: float) -> None:
        assert self.workdir is not None
        self._run(
            run_as,
            "pg_ctl",
            "start",
            "-D", str(self.data_dir),
            "-l", str(self.workdir / "postgres.log"),
            "-o", " ".join(self._options),
            "-w",
            "-t", str(int(timeout)),
            timeout=timeout + 5,
        )  # fmt: skip
        self._started = True

    def resume(self, timeout: float = 60.0) -> None:
        """Start again after ``stop``, on the same port with the same data (an outage)."""
        assert self.workdir is not None and not self._started
        self._pg_ctl_start(_run_as(), timeout)

    def _run(self, run_as: str | None, tool: str, *args: str, timeout: float) -> str:
        assert self.bin_dir is not None
        proc = subprocess.run(
            [str(self.bin_dir / tool), *args],
            user=run_as,
            cwd=self.workdir,
            env={**os.environ, "LC_ALL": "C", "PGTZ": "UTC"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            log = self.workdir / "postgres.log" if self.workdir else None
            tail = log.read_text(errors="replace")[-800:] if log and log.exists() else ""
            raise PostgresUnavailable(
                f"{tool} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}"
                + (f"\n{tail}" if tail else "")
            )
        return proc.stdout

    def _create_database(self) -> None:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            password=self.password,
            dbname="postgres",
            autocommit=True,
            connect_timeout=10,
        ) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
            row = conn.execute("SHOW server_version").fetchone()
            self.version = str(row[0]) if row else ""

    def stop(self) -> None:
        if not self._started or self.workdir is None:
            return
        self._started = False
        with contextlib.suppress(PostgresUnavailable, subprocess.TimeoutExpired):
            # "fast": roll back open transactions and disconnect clients, then stop.
            self._run(
                _run_as(), "pg_ctl", "stop", "-D", str(self.data_dir), "-m", "fast", "-w",
                timeout=60,
            )  # fmt: skip
            return
        with contextlib.suppress(PostgresUnavailable, subprocess.TimeoutExpired):
            self._run(
                _run_as(), "pg_ctl", "stop", "-D", str(self.data_dir), "-m", "immediate",
                timeout=30,
            )  # fmt: skip

    def cleanup(self) -> None:
        self.stop()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """A started private server, cleaned up after; a test without one fails, saying how to
    get one (never a skip)."""
    from tests.servers import started

    with started(PostgresServer(), PostgresUnavailable) as server:
        yield server


@contextlib.contextmanager
def client_backends(url: str) -> Iterator[Callable[[], set[int]]]:
    """A probe of the database ``url`` names: each call answers the pids of the other
    client connections. One connection for every call, so a probe never counts the
    backend of its own previous call while that one is still exiting."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:

        def backends() -> set[int]:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchall()
            return {pid for (pid,) in rows}

        yield backends
