"""Django settings for Ackboard, read from the environment.

Production is the default: DEBUG is off and ``DJANGO_SECRET_KEY`` is required. The
``demo`` command (manage.py sets ``ACKBOARD_DEMO``) gets embedded defaults instead, so
a newcomer with only Python and uv can run the product.
"""

from __future__ import annotations

import os
import re
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
import django
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured
from redis.asyncio.retry import Retry as _LayerRetry
from redis.backoff import ExponentialWithJitterBackoff as _LayerBackoff

from dashboard.display import redact_rules as _redact_rules
from queue_core.connection import redis_url
from queue_core.keys import ALERTS_KEY, RATES_SAMPLER_LEASE_KEY, parse_allowlist

BASE_DIR = Path(__file__).resolve().parent.parent


# A mistyped setting is refused with one line naming it (manage.py prints it without a
# traceback and exits 2), never read as some other value: "DJANGO_HTTPS=flase" is not
# "off", and "ACKBOARD_BULK_CAP=1k" is not a crash inside int().
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def _flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    word = value.strip().lower()
    if word not in _TRUE | _FALSE:
        raise ImproperlyConfigured(
            f"{name} must be 1 or 0 (or true/false, yes/no, on/off), not {value!r}"
        )
    return word in _TRUE


def _int(name: str, default: int, *, minimum: int = 0) -> int:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        number = int(value.strip().replace("_", ""))
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise ImproperlyConfigured(
            f"{name} must be a whole number of at least {minimum}, not {value!r}"
        )
    return number


def _float(name: str, default: float, *, minimum: float = 0.0) -> float:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        number = float(value.strip())
    except ValueError:
        number = float("nan")
    if not number >= minimum or number == float("inf"):  # also refuses nan
        raise ImproperlyConfigured(
            f"{name} must be a number of at least {minimum:g}, not {value!r}"
        )
    return number


def _list(name: str, default: str) -> list[str]:
    return [v.strip() for v in os.environ.get(name, default).split(",") if v.strip()]


DEBUG = _flag("DJANGO_DEBUG")
DEMO = _flag("ACKBOARD_DEMO")
#: Set by manage.py for commands that serve no web requests (queue_worker, ingest_failures).
HEADLESS = _flag("ACKBOARD_HEADLESS")
#: Local state for the demo and for development: SQLite file, generated secret key.
ACKBOARD_HOME = Path(os.environ.get("ACKBOARD_HOME", BASE_DIR / ".ackboard"))


def _secret_key() -> str:
    key = os.environ.get("DJANGO_SECRET_KEY")
    if key:
        return key
    if HEADLESS:
        # Workers and ingestors sign no cookies or tokens: a throwaway key is enough.
        return secrets.token_urlsafe(50)
    if not (DEBUG or DEMO):
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is required when DJANGO_DEBUG is off. Set it to a long random "
            "string, or run the demo: uv run python manage.py demo"
        )
    # Development and demo only: a key kept in the local state dir, so logins survive restarts.
    path = ACKBOARD_HOME / "secret_key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = _list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = _list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "csp",
    "axes",
    "dashboard",
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.insert(INSTALLED_APPS.index("django_htmx"), "template_partials")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # HTML and htmx answers compressed (the 50-row group page: 116 KB -> 10 KB, about 1 ms
    # of CPU). BREACH needs a secret in the body, attacker text reflected beside it, and many
    # requests sent with the victim's cookies: the CSRF token is masked afresh in every
    # response, session cookies are SameSite=Lax (no cross-site subresource requests carry
    # them), and this middleware pads each answer with random-length bytes (Django's
    # "Heal The Breach" mitigation). Static files stay WhiteNoise's, above.
    "django.middleware.gzip.GZipMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A role's stream patterns: a read of a stream it does not reach is a 404.
    "dashboard.access.scopes.StreamScopeMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "dashboard.runtime.middleware.RedisErrorMiddleware",
    # Last, as axes documents: it turns a lockout flagged during the login into the 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
ASGI_APPLICATION = "dashboard.asgi.application"

_builtins = ["django.templatetags.static"]
if django.VERSION < (6, 0):
    # Django 6 has {% partialdef %} built in; on 5.2 the package provides the same tag.
    _builtins.append("template_partials.templatetags.partials")

TEMPLATES: list[dict[str, Any]] = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                # After it: on a stream's page, ``perms`` holds what reaches that stream.
                "dashboard.access.scopes.stream_perms",
                "django.contrib.messages.context_processors.messages",
            ],
            "builtins": _builtins,
        },
    }
]
if django.VERSION < (6, 0):
    # template_partials wraps the loaders itself when this is set.
    TEMPLATES[0]["OPTIONS"]["debug"] = DEBUG

try:
    DATABASES = {
        "default": dj_database_url.config(
            default=f"sqlite:///{ACKBOARD_HOME / 'db.sqlite3'}", conn_max_age=60
        )
    }
except dj_database_url.UnknownSchemeError:
    raise ImproperlyConfigured(
        "DATABASE_URL must start with postgres://, postgresql:// or sqlite:///"
    ) from None
except ValueError:  # the URL itself is never repeated: it may hold a password
    raise ImproperlyConfigured(
        "DATABASE_URL is not a valid URL (are special characters in the password %-encoded?)"
    ) from None
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # Under ASGI each request runs in a thread of its own, so a persistent connection is
    # never reused and would stay open until collected: each request opens its own and
    # closes it at its end (Django has no SQLite pool; docs/benchmarks.md measures it).
    DATABASES["default"]["CONN_MAX_AGE"] = 0
#: Most PostgreSQL connections one process keeps open (its pool's size); 0: no pool (behind
#: PgBouncer, say), a connection per request.
ACKBOARD_DB_POOL_SIZE = _int("ACKBOARD_DB_POOL_SIZE", 20)
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # Under ASGI, Django runs each request's sync code in a thread of its own (asgiref's
    # ThreadSensitiveContext), so a persistent connection (CONN_MAX_AGE) is never reused:
    # every page opened a new PostgreSQL connection (TCP and authentication) and left it
    # open until garbage collection. A pool (Django's psycopg_pool support) hands each
    # request an open connection and takes it back when the request ends; background
    # loops return theirs the same way (close_old_connections). Pooling requires
    # CONN_MAX_AGE 0; without a pool, 0 closes each request's connection at its end.
    # benchmarks.serving --db postgres measures both.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    if ACKBOARD_DB_POOL_SIZE:
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            # Room for the background threads' connections beside the requests'.
            "max_size": max(4, ACKBOARD_DB_POOL_SIZE),
            # How long a request waits for a connection: past it (the database down, or
            # every connection busy) the page is a 503 (RedisErrorMiddleware), not a hang.
            "timeout": 3,
        }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out username+address before any password is checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "login"

# Single sign-on through an OpenID Connect provider (docs/access.md), off unless
# ACKBOARD_OIDC_ISSUER is set. The provider's endpoints come from its discovery document,
# read at the first sign-in (dashboard.access.oidc), so a provider that is down stops
# sign-ins, never the process. Local passwords stay on unless ACKBOARD_LOCAL_LOGIN=0.
ACKBOARD_OIDC_ISSUER = os.environ.get("ACKBOARD_OIDC_ISSUER", "").strip()
ACKBOARD_OIDC_ENABLED = bool(ACKBOARD_OIDC_ISSUER)
ACKBOARD_LOCAL_LOGIN = _flag("ACKBOARD_LOCAL_LOGIN", True)
#: What the login page's button says: "Log in with <name>".
ACKBOARD_OIDC_PROVIDER_NAME = (
    os.environ.get("ACKBOARD_OIDC_PROVIDER_NAME", "").strip() or "single sign-on"
)
#: The claim that names the user (its value is the Ackboard username, matched exactly).
ACKBOARD_OIDC_USERNAME_CLAIM = os.environ.get("ACKBOARD_OIDC_USERNAME_CLAIM", "").strip() or "email"
#: The claim that lists the user's groups (or roles: Entra ID's app roles are "roles").
ACKBOARD_OIDC_GROUPS_CLAIM = os.environ.get("ACKBOARD_OIDC_GROUPS_CLAIM", "").strip() or "groups"
ACKBOARD_OIDC_ROLES: dict[str, str] = {}
if ACKBOARD_OIDC_ENABLED:
    from dashboard.access import sso_config

    for _name in ("ACKBOARD_OIDC_CLIENT_ID", "ACKBOARD_OIDC_CLIENT_SECRET", "ACKBOARD_OIDC_ROLES"):
        if not os.environ.get(_name, "").strip():
            raise ImproperlyConfigured(f"{_name} is required when ACKBOARD_OIDC_ISSUER is set")
    if urlsplit(ACKBOARD_OIDC_ISSUER).scheme not in {"https", "http"}:
        raise ImproperlyConfigured(
            "ACKBOARD_OIDC_ISSUER must be a URL starting with https:// (or http://)"
        )
    #: Provider group -> Ackboard role (grant_role's names: operator, read-only).
    ACKBOARD_OIDC_ROLES = sso_config.role_map_parse(os.environ["ACKBOARD_OIDC_ROLES"])
    OIDC_RP_CLIENT_ID = os.environ["ACKBOARD_OIDC_CLIENT_ID"].strip()
    OIDC_RP_CLIENT_SECRET = os.environ["ACKBOARD_OIDC_CLIENT_SECRET"].strip()
    OIDC_RP_SIGN_ALGO = os.environ.get("ACKBOARD_OIDC_SIGN_ALGO", "").strip() or "RS256"
    OIDC_RP_SCOPES = os.environ.get("ACKBOARD_OIDC_SCOPES", "").strip() or "openid email profile"
    OIDC_USE_PKCE = True
    OIDC_TIMEOUT = 10
    OIDC_CALLBACK_CLASS = "dashboard.access.oidc.CallbackView"
    OIDC_AUTHENTICATE_CLASS = "dashboard.access.oidc.AuthenticationRequestView"
    #: Minutes a sign-on session is trusted before its roles are read again from the
    #: provider (a silent round trip while the provider's own session lasts).
    OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = round(
        60 * _float("ACKBOARD_OIDC_RENEW_MINUTES", 15.0, minimum=0.05)
    )
    OIDC_EXEMPT_URLS = ["login", "logout", "/healthz", "/metrics"]
    AUTHENTICATION_BACKENDS.append(sso_config.BACKEND)
    MIDDLEWARE.insert(
        MIDDLEWARE.index("django_htmx.middleware.HtmxMiddleware") + 1,
        sso_config.RENEWAL_MIDDLEWARE,
    )
    #: Refused SSO logins are counted per user (the name from the provider), as for a
    #: wrong password; see dashboard.access.login_throttle.
    AXES_USERNAME_CALLABLE = "dashboard.access.login_throttle.login_username"
if not ACKBOARD_LOCAL_LOGIN:
    if not ACKBOARD_OIDC_ENABLED:
        raise ImproperlyConfigured(
            "ACKBOARD_LOCAL_LOGIN=0 needs single sign-on (ACKBOARD_OIDC_ISSUER): "
            "else nobody could log in"
        )
    # Without ModelBackend no password logs in anywhere (admin site included), and
    # sessions that a password opened end at their next request.
    AUTHENTICATION_BACKENDS.remove("django.contrib.auth.backends.ModelBackend")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# WhiteNoise serves app static files straight from the finders, so no collectstatic step
# is needed (demo, tests, small deployments). Set DJANGO_STATIC_ROOT to collect them.
STATIC_ROOT = os.environ.get("DJANGO_STATIC_ROOT") or None
WHITENOISE_USE_FINDERS = True

# --- Ackboard ---------------------------------------------------------------------------
ACKBOARD_REDIS_URL = redis_url()


def _redis_url_check(url: str, name: str) -> None:
    """Refuse a URL redis-py could not use, here rather than at the first command."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise ImproperlyConfigured(f"{name} is not a valid URL (is its port a number?)") from None
    if parts.scheme not in {"redis", "rediss", "unix"}:
        found = f"{parts.scheme}://" if parts.scheme else "no scheme"
        raise ImproperlyConfigured(
            f"{name} must start with redis://, rediss:// or unix://, not {found}"
        )


_redis_url_check(
    ACKBOARD_REDIS_URL,
    "VALKEY_URL" if os.environ.get("VALKEY_URL") else "REDIS_URL",
)
#: Allowlist of stream name glob patterns the dashboard may see (comma-separated).
ACKBOARD_STREAMS = parse_allowlist(os.environ.get("ACKBOARD_STREAMS"))
#: Every dashboard Redis command gives up after this many seconds: an error banner, not a hang.
ACKBOARD_REDIS_TIMEOUT = _float("ACKBOARD_REDIS_TIMEOUT", 2.0)
#: Payload fields whose names match this (case-insensitive) regex are redacted.
ACKBOARD_REDACT_PATTERN = os.environ.get("ACKBOARD_REDACT_PATTERN", r"password|secret|token|key")
#: More fields redacted on some streams (docs/configuration.md): rules
#: ``STREAM_PATTERN=FIELD_REGEX`` separated by ";", on top of the pattern above.
ACKBOARD_REDACT_RULES = os.environ.get("ACKBOARD_REDACT_RULES", "").strip()

try:
    _redact_rules.settings_check(ACKBOARD_REDACT_PATTERN, ACKBOARD_REDACT_RULES)
except ValueError as _exc:
    raise ImproperlyConfigured(str(_exc)) from None
#: Payload decoders per stream pattern (docs/configuration.md, "Payload decoders"): rules
#: ``PATTERN[#FIELD]=DECODER[,DECODER…]`` separated by ";"; fields no rule names are "auto".
ACKBOARD_DECODERS = os.environ.get("ACKBOARD_DECODERS", "").strip()
#: The protobuf descriptor set (a FileDescriptorSet file) that protobuf decoders read.
ACKBOARD_PROTO_DESCRIPTORS = os.environ.get("ACKBOARD_PROTO_DESCRIPTORS", "").strip()
#: Trace links (docs/configuration.md): the tracing UI's URL with ``{trace_id}``, and the
#: entry field holding a W3C ``traceparent``.
ACKBOARD_TRACE_URL = os.environ.get("ACKBOARD_TRACE_URL", "").strip()
ACKBOARD_TRACE_FIELD = os.environ.get("ACKBOARD_TRACE_FIELD", "traceparent").strip()
if ACKBOARD_TRACE_URL and not re.match(r"https?://.*\{trace_id\}", ACKBOARD_TRACE_URL):
    raise ImproperlyConfigured("ACKBOARD_TRACE_URL must be an http(s) URL with {trace_id} in it")


def _decoders_check() -> None:
    from dashboard.display import decoders, protobuf_set

    try:
        types = decoders.protobuf_types(decoders.rules_parse(ACKBOARD_DECODERS))
        if types and not ACKBOARD_PROTO_DESCRIPTORS:
            raise ValueError("protobuf needs ACKBOARD_PROTO_DESCRIPTORS (a descriptor set file)")
        if ACKBOARD_PROTO_DESCRIPTORS:
            protobuf_set.protobuf_check(ACKBOARD_PROTO_DESCRIPTORS, types)
    except ValueError as exc:
        raise ImproperlyConfigured(f"ACKBOARD_DECODERS: {exc}") from None


if ACKBOARD_DECODERS or ACKBOARD_PROTO_DESCRIPTORS:
    _decoders_check()
#: Safety cap on the overview's stream index (names kept per web process, about 100 bytes
#: each); streams past it are not listed and the overview says so. Every stream below it
#: is reachable through the overview's pages and filter.
ACKBOARD_MAX_STREAMS = _int("ACKBOARD_MAX_STREAMS", 100_000, minimum=1)
#: Streams per overview page (each page reads only its own rows: two round trips). 25
#: keeps the page within 5x a /healthz round trip end to end (benchmarks.serving; 50 rows
#: measured 13-17 ms, 25 rows 10-17 ms, /healthz 2-7 ms, on the loaded 2-core machine).
ACKBOARD_OVERVIEW_PAGE_SIZE = _int("ACKBOARD_OVERVIEW_PAGE_SIZE", 25, minimum=1)
#: Seconds between two background refreshes of the stream index (a SCAN pass of the
#: keyspace and a round of per-stream figures, each in bounded steps, off the request path).
ACKBOARD_INDEX_REFRESH_S = _float("ACKBOARD_INDEX_REFRESH_S", 10.0, minimum=0.1)
#: Up to this many streams /metrics reads every stream's figures fresh per collection;
#: above it, it reports the stream index's background-refreshed figures and their age.
ACKBOARD_METRICS_FRESH_MAX = _int("ACKBOARD_METRICS_FRESH_MAX", 1_000)
#: Whether a background thread keeps the stream index warm (off only in tests that step it).
ACKBOARD_INDEX_BACKGROUND = _flag("ACKBOARD_INDEX_BACKGROUND", True)
#: Most entries one bulk request may touch.
ACKBOARD_BULK_CAP = _int("ACKBOARD_BULK_CAP", 1000, minimum=1)
#: Idle time given to an entry by Retry, so a worker's reclaim sweep takes it. Keep it at
#: or above the workers' --min-idle-ms.
ACKBOARD_RETRY_IDLE_MS = _int("ACKBOARD_RETRY_IDLE_MS", 30000)
#: A group is "stuck" when consumers not seen for this many ms hold pending entries, and
#: has "no live consumer" when work waits and no consumer was seen within it (health from
#: XINFO CONSUMERS, whoever wrote the workers). Keep it above twice the workers'
#: --min-idle-ms and above the slowest handler (on Redis < 7.2 a consumer counts as seen
#: only when it last received entries).
ACKBOARD_STUCK_AFTER_MS = _int("ACKBOARD_STUCK_AFTER_MS", 60000)
#: Consumer name used by Claim when the operator does not pick one.
ACKBOARD_OPERATOR_CONSUMER = os.environ.get("ACKBOARD_OPERATOR_CONSUMER", "ackboard-operator")
#: Days of failure history kept in SQL by ``prune_failures``.
ACKBOARD_FAILURE_RETENTION_DAYS = _int("ACKBOARD_FAILURE_RETENTION_DAYS", 30)
#: Time budget of one failure search, in ms; a broader search is stopped with a message.
ACKBOARD_FAILURE_SEARCH_MS = _int("ACKBOARD_FAILURE_SEARCH_MS", 1500)
#: Whether web processes run the rates sampler thread (dashboard.insight.rates.sampler): one per
#: deployment samples at a time, whoever holds its Redis lease; ``manage.py sample_rates``
#: runs it standalone instead (then set this to 0 on the web processes).
ACKBOARD_SAMPLER = _flag("ACKBOARD_SAMPLER", True)
#: Seconds between two samples of every stream's counters (the finest tier of the history).
ACKBOARD_SAMPLER_INTERVAL_S = _float("ACKBOARD_SAMPLER_INTERVAL_S", 10.0, minimum=0.1)
#: The Redis key of the sampler's one-per-deployment lease. Two deployments with their own
#: databases on one Redis (say, two teams' dashboards over different allowlists) each need
#: their own key, else only one of them samples and the other's charts stay empty.
ACKBOARD_SAMPLER_LEASE_KEY = (
    os.environ.get("ACKBOARD_SAMPLER_LEASE_KEY", "").strip() or RATES_SAMPLER_LEASE_KEY
)
#: Days of rates history kept (the 10-minute tier; the finer tiers keep 1 and 7 days).
ACKBOARD_RATES_RETENTION_DAYS = _int("ACKBOARD_RATES_RETENTION_DAYS", 90, minimum=1)
#: The alert sender (``manage.py send_alerts``, dashboard.alerts): seconds between two
#: judgements of the alert rules, each POST's timeout, and the dashboard's public URL
#: (https://ackboard.example.com) that alerts link to ("" = links are paths only).
ACKBOARD_ALERTS_INTERVAL_S = _float("ACKBOARD_ALERTS_INTERVAL_S", 30.0, minimum=1.0)
ACKBOARD_ALERTS_TIMEOUT_S = _float("ACKBOARD_ALERTS_TIMEOUT_S", 5.0, minimum=0.1)
ACKBOARD_ALERTS_BASE_URL = os.environ.get("ACKBOARD_ALERTS_BASE_URL", "").strip().rstrip("/")
#: The sender's Redis keys are this plus ``:sender`` (its lease) and ``:state`` (what began
#: and what was sent): one per deployment when several, each with its own database, share
#: one Redis (as ``ACKBOARD_SAMPLER_LEASE_KEY``).
ACKBOARD_ALERTS_KEY = os.environ.get("ACKBOARD_ALERTS_KEY", "").strip() or ALERTS_KEY
#: Bearer token a Prometheus scraper may send to /metrics instead of logging in ("" = none).
ACKBOARD_METRICS_TOKEN = os.environ.get("ACKBOARD_METRICS_TOKEN", "")
#: Seconds between the live broadcaster's polls of open streams.
ACKBOARD_LIVE_TICK = _float("ACKBOARD_LIVE_TICK", 1.0)

# Redrive jobs (dashboard.redrive, run by ``manage.py run_jobs``): the highest rate a job
# may ask for (replays a second), and how long a runner's lease on a job lasts unrenewed
# (another runner takes the job over after that when one dies).
ACKBOARD_REDRIVE_MAX_RATE = _float("ACKBOARD_REDRIVE_MAX_RATE", 50.0, minimum=0.1)
ACKBOARD_REDRIVE_LEASE_S = _float("ACKBOARD_REDRIVE_LEASE_S", 10.0, minimum=1.0)

#: Seconds a live socket's session and permissions are trusted before they are read again.
ACKBOARD_LIVE_RECHECK = _float("ACKBOARD_LIVE_RECHECK", 2.0)

# Channel layers (docs/live-updates.md). Pushes to the sockets of this process use none:
# the broadcaster hands them to each socket's outbox (dashboard/live/outbox.py), so a push
# never needs Redis, and a Redis restart cannot silence an open socket. "default" (in
# memory) is only channels' default alias. "shared" is for what must reach every web
# process: the notice that a session ended (dashboard/live/session.py).
#
# "shared" is channels-redis's pub/sub layer: PUBLISH/SUBSCRIBE only, no keys, so the one
# URL works on a standalone Redis and on any node of a Redis Cluster (a classic PUBLISH
# reaches the subscribers of every node; channels-redis's list-based layer does not speak
# the cluster protocol: its BZPOPMIN and multi-key scripts get MOVED/CROSSSLOT). Delivery
# is at most once, to processes listening at the time: a notice lost during an outage is
# caught by the socket's own session re-check within ACKBOARD_LIVE_RECHECK seconds.
# ACKBOARD_CHANNELS_URL puts the layer on another server (default: ACKBOARD_REDIS_URL).
#
# The connection is configured explicitly, not from a bare URL: keepalive and a health
# check find dead connections, reads get a bounded timeout, and a short retry reconnects
# (redis-py re-subscribes on reconnect) across a quick Redis restart.
_LAYER_READ_S = 10
ACKBOARD_CHANNELS_URL = os.environ.get("ACKBOARD_CHANNELS_URL") or ACKBOARD_REDIS_URL
if os.environ.get("ACKBOARD_CHANNELS_URL"):
    _redis_url_check(ACKBOARD_CHANNELS_URL, "ACKBOARD_CHANNELS_URL")
CHANNEL_LAYERS: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "channels.layers.InMemoryChannelLayer"},
    "shared": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            "hosts": [
                {
                    "address": ACKBOARD_CHANNELS_URL,
                    "socket_timeout": _LAYER_READ_S,
                    "socket_connect_timeout": 2,
                    "socket_keepalive": True,
                    "health_check_interval": 15,
                    "retry": _LayerRetry(_LayerBackoff(base=0.1, cap=1.0), retries=3),
                }
            ],
            "prefix": "ackboard:channels:",
        },
    },
}

CACHES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # {% cache %} renderings (the group page's pending table, keyed by a digest of what it
    # shows: templatetags/ackboard_rows.py), per process: at most ~100 tables of ~100 KB.
    "template_fragments": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "ackboard-fragments",
        "TIMEOUT": 300,
        "OPTIONS": {"MAX_ENTRIES": 100},
    },
}
# Sessions in the database, Django's own engine: a logout deletes the row, so it ends the
# session in every web process at once, whatever state Redis is in.
SESSION_ENGINE = "django.contrib.sessions.backends.db"

# --- security ---------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
# Django's default, stated because compressing pages relies on it (GZipMiddleware above).
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Production assumes HTTPS: secure cookies, HSTS, and plain HTTP redirected (301) to https.
# Behind a proxy that ends TLS, set DJANGO_BEHIND_PROXY=1 so its X-Forwarded-Proto says
# which requests were https. Served as plain HTTP (on loopback, or behind a proxy that
# speaks plain HTTP to it and redirects by itself), set DJANGO_HTTPS=0: no redirect, no
# HSTS, cookies without Secure (a browser would not send Secure cookies back over http).
_https = not (DEBUG or DEMO) and _flag("DJANGO_HTTPS", True)
SESSION_COOKIE_SECURE = _https
CSRF_COOKIE_SECURE = _https
SECURE_SSL_REDIRECT = _https and _flag("DJANGO_SSL_REDIRECT", True)
#: Load balancers probe over plain HTTP and count a 301 as down: /healthz always answers.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = _int("DJANGO_HSTS_SECONDS", 31536000 if _https else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _https
SECURE_HSTS_PRELOAD = _https
if _flag("DJANGO_BEHIND_PROXY"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
#: Proxies in front of the app that append to X-Forwarded-For (DJANGO_PROXY_COUNT, only
#: read with DJANGO_BEHIND_PROXY): the client address is that many entries from the right.
ACKBOARD_TRUSTED_PROXIES = _int("DJANGO_PROXY_COUNT", 1) if _flag("DJANGO_BEHIND_PROXY") else 0

# Content-Security-Policy (django-csp): no inline script, no eval, no inline style. A
# payload that ever slipped past escaping could then not run, and the console cannot be
# framed. Page behaviour lives in static/dashboard/*.js; htmx is configured (base.html)
# not to eval, not to inject its indicator <style> and not to run swapped-in <script>.
# 'self' in connect-src covers the same-origin ws:/wss: of the live sockets.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    }
}

# Login throttle (django-axes): after ACKBOARD_LOGIN_FAILURE_LIMIT failed logins for one
# username from one address, that pair is refused (429, registration/locked_out.html),
# even with the right password, for ACKBOARD_LOGIN_COOLOFF_MINUTES after the last counted
# failure. Keyed on the pair, so a guesser cannot lock a user out from elsewhere. Attempts
# are rows in the database, shared by every web process. Unlock early:
# ``manage.py axes_reset_username <name>`` (or ``axes_reset``).
AXES_FAILURE_LIMIT = _int("ACKBOARD_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=_float("ACKBOARD_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
#: A successful login clears that pair's failures: typos spread over a day never add up.
AXES_RESET_ON_SUCCESS = True
#: Attempts while locked out are refused without being written: a flood neither grows the
#: attempt row (axes appends each attempt's form data to it) nor extends the wait.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "dashboard.access.login_throttle.client_ip"

_LOG_LEVEL = os.environ.get("ACKBOARD_LOG_LEVEL", "INFO").strip().upper() or "INFO"
if _LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(
        f"ACKBOARD_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not {_LOG_LEVEL!r}"
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "filters": {
        "library_outage": {"()": "dashboard.runtime.log_filters.LibraryOutage"},
        "client_error_line": {"()": "dashboard.runtime.log_filters.ClientErrorLine"},
    },
    "root": {"handlers": ["console"], "level": _LOG_LEVEL},
    "loggers": {
        # axes announces itself at INFO in every process, before any command's own output
        # (a configuration error's one line on stderr would be its second).
        "axes.apps": {"level": "WARNING"},
        # channels-redis logs a traceback a second while Redis is down: one line instead
        # (a logger's filters see only its own records, so each module's logger).
        "channels_redis.pubsub": {"filters": ["library_outage"]},
        "channels_redis.core": {"filters": ["library_outage"]},
        # Django logs each 403 (and other 4xx) it answers for an exception with the whole
        # traceback: one line each instead (dashboard/runtime/log_filters.py).
        "django.request": {"filters": ["client_error_line"]},
    },
}
