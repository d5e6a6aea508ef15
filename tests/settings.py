"""Test settings: production settings with a fixed key, plain HTTP and an in-memory layer.

The database is SQLite unless ``ACKBOARD_TEST_DB=postgres``: then it is the PostgreSQL at
``ACKBOARD_TEST_DATABASE_URL``, or, when that is unset, a private one started here
(tests/postgres_server.py) and stopped when the process exits. Its URL is put in the
environment, so processes the tests start reuse it rather than starting their own.
tests/dashboard/test_databases.py runs the database tests this way inside ``uv run pytest``.
"""

import atexit
import os
import tempfile

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-" + "x" * 50)
os.environ.setdefault("DJANGO_HTTPS", "0")

from dashboard.settings import *  # noqa: E402,F403

# A file, not ":memory:": threads of the ingest loop and the test share it, and an in-memory
# shared-cache database answers a concurrent reader with "table is locked" at once, where a
# file database waits for the writer (busy timeout), as in production.
_DB = os.path.join(tempfile.gettempdir(), f"ackboard-tests-{os.getpid()}.sqlite3")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": _DB,
        "TEST": {"NAME": _DB},
        "OPTIONS": {"timeout": 20},
    }
}


def _private_postgres_url() -> str:
    url = os.environ.get("ACKBOARD_TEST_DATABASE_URL")
    if url:
        return url
    from tests.postgres_server import PostgresServer

    server = PostgresServer().start()
    atexit.register(server.cleanup)
    os.environ["ACKBOARD_TEST_DATABASE_URL"] = server.url
    return server.url


TEST_DB = os.environ.get("ACKBOARD_TEST_DB", "sqlite").strip().lower() or "sqlite"
if TEST_DB in ("postgres", "postgresql"):
    TEST_DB = "postgres"
    # pytest-django creates and drops its own test_<name> database on that server.
    DATABASES = {"default": dj_database_url.parse(_private_postgres_url())}
elif TEST_DB != "sqlite":
    raise ImproperlyConfigured(f"ACKBOARD_TEST_DB={TEST_DB!r}: expected sqlite or postgres")
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
# The login throttle needs the request in authenticate(), which the test client's login()
# does not pass; axes documents turning it off for tests. tests/dashboard/
# test_login_throttle.py turns it back on, and the browser tests run production settings.
AXES_ENABLED = False
# The rates sampler thread is off in tests: tests/dashboard/test_rates.py and
# tests/integration/test_rates_workers.py run it where they test it.
ACKBOARD_SAMPLER = False
