"""The Celery application. Workers: ``celery -A support worker``; beat: ``celery -A support beat``."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "support.settings")

app = Celery("support")


@worker_init.connect
def _keep_database_connections(**kwargs: object) -> None:
    """A worker keeps its database connection between tasks (WORKER_DB_CONN_MAX_AGE seconds,
    checked before reuse): no new connection per doorbell, and statements stay prepared."""
    from django.conf import settings

    from support.settings import env_int

    default = settings.DATABASES["default"]
    default["CONN_MAX_AGE"] = env_int("WORKER_DB_CONN_MAX_AGE", 300)
    default["CONN_HEALTH_CHECKS"] = True


app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
