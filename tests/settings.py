"""Test settings: production settings with a fixed key, plain HTTP and an in-memory layer."""

import os
import tempfile

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
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
# The login throttle needs the request in authenticate(), which the test client's login()
# does not pass; axes documents turning it off for tests. tests/dashboard/
# test_login_throttle.py turns it back on, and the browser tests run production settings.
AXES_ENABLED = False
