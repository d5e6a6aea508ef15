"""Test settings: production settings with a fixed key, plain HTTP and an in-memory layer."""

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-" + "x" * 50)
os.environ.setdefault("DJANGO_HTTPS", "0")

from dashboard.settings import *  # noqa: E402,F403

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
