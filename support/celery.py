"""The Celery application. Workers: ``celery -A support worker``; beat: ``celery -A support beat``."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Task
from celery.fixups.django import DjangoFixup, DjangoWorkerFixup
from celery.signals import worker_init
from psycopg.pq import TransactionStatus

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "support.settings")


class KeepConnectionWorkerFixup(DjangoWorkerFixup):
    """Celery's Django fix-up, but a task leaves the worker's database connection open for the
    next one when it can be trusted, instead of closing it before and after every task: no new
    PostgreSQL connection (a handshake and a server process) before each doorbell is answered,
    and statements stay prepared.

    Closed all the same, as Celery would: after a task that did not succeed (it may have left a
    query cut off by a time limit, or a lease's advisory lock it could not release), when the
    connection is not idle (a transaction or a query still open), and when Django would close it
    at the end of a request (older than WORKER_DB_CONN_MAX_AGE, or an error made it unusable);
    a kept connection is health-checked before its next use.
    """

    def on_task_prerun(self, sender: Task, **kwargs: Any) -> None:
        if not getattr(sender.request, "is_eager", False):
            self.close_unless_reusable(succeeded=True)

    def on_task_postrun(self, sender: Task, **kwargs: Any) -> None:
        if not getattr(sender.request, "is_eager", False):
            self.close_unless_reusable(succeeded=kwargs.get("state") == "SUCCESS")
            self.close_cache()

    def close_unless_reusable(self, *, succeeded: bool) -> None:
        for conn in self._db.connections.all(initialized_only=True):
            raw = conn.connection
            if raw is None:
                continue
            if not succeeded or raw.info.transaction_status != TransactionStatus.IDLE:
                conn.close()
            else:
                conn.close_if_unusable_or_obsolete()


class KeepConnectionFixup(DjangoFixup):
    @property
    def worker_fixup(self) -> DjangoWorkerFixup:
        if self._worker_fixup is None:
            self._worker_fixup = KeepConnectionWorkerFixup(self.app)
        return self._worker_fixup

    @worker_fixup.setter
    def worker_fixup(self, value: DjangoWorkerFixup) -> None:
        self._worker_fixup = value


def django_fixup(app: Celery) -> DjangoFixup:
    """Installed in place of Celery's own ``celery.fixups.django:fixup`` (the app's ``fixups``)."""
    return KeepConnectionFixup(app).install()


app = Celery("support", fixups=["support.celery:django_fixup"])


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
