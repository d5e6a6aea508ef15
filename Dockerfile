# syntax=docker/dockerfile:1
# Ackboard's image: the dashboard and every manage.py command, installed from uv.lock.
#
# One image, one process per container. The default command is the web server
# (`manage.py serve` on $PORT, 8000 when unset); the same image runs the other processes
# by command, e.g.
#   docker run IMAGE python manage.py migrate --noinput
#   docker run IMAGE python manage.py queue_worker --stream orders --group billing --handler myapp.jobs:charge
#   docker run IMAGE python manage.py ingest_failures
#   docker run IMAGE python manage.py run_jobs
# Production settings need DJANGO_SECRET_KEY (web and run_jobs), VALKEY_URL or REDIS_URL,
# and DATABASE_URL for PostgreSQL (docs/configuration.md). Workers need Redis only.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# --- build: the virtual environment, from the lock file alone ------------------------
FROM ${PYTHON_IMAGE} AS build
COPY --from=ghcr.io/astral-sh/uv:0.13.10 /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/app/.venv
WORKDIR /app
# The dependencies first: this layer is rebuilt only when the lock file changes. The
# dashboard group and no dev tools (no pytest, no browser driver); the faststream extra
# so the payload decoders read FastStream's binary messages.
COPY pyproject.toml uv.lock ./
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-default-groups --group dashboard --extra faststream --no-install-project
COPY . .
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-default-groups --group dashboard --extra faststream

# --- runtime: the same Python, the environment and the source, as a user without rights
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 ackboard \
    && useradd --system --uid 10001 --gid ackboard --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin ackboard \
    && mkdir /data \
    && chown ackboard:ackboard /data
COPY --from=build --chown=root:root /app /app
WORKDIR /app
# ACKBOARD_HOME holds the SQLite file when DATABASE_URL is unset: the one writable place.
ENV PATH="/app/.venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ACKBOARD_HOME=/data
# By id: the platform need not resolve the name (the user is 10001:10001 above).
USER 10001:10001
EXPOSE 8000
# exec: the server is PID 1 and gets SIGTERM itself (its grace period, not a killed shell).
CMD ["sh", "-c", "exec python manage.py serve --host 0.0.0.0 --port \"${PORT:-8000}\""]
