"""The Celery application. Workers: ``celery -A support worker``; beat: ``celery -A support beat``."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "support.settings")

app = Celery("support")


def keep_worker_connection(default: dict[str, Any]) -> None:
    """A worker keeps its database connection between tasks (WORKER_DB_CONN_MAX_AGE seconds,
    checked before reuse): no new connection per doorbell, and statements stay prepared. It is
    the worker's own, never one lent by the web's pool (DB_POOL): a ticket's lease holds a
    session-level advisory lock on it for as long as the worker works on the ticket."""
    from support.settings import env_int

    default["OPTIONS"].pop("pool", None)
    default["CONN_MAX_AGE"] = env_int("WORKER_DB_CONN_MAX_AGE", 300)
    default["CONN_HEALTH_CHECKS"] = True


@worker_init.connect
def _keep_database_connections(**kwargs: object) -> None:
    from django.conf import settings

    keep_worker_connection(settings.DATABASES["default"])


app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
