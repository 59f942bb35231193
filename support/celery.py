"""The Celery application. Workers: ``celery -A support worker``; beat: ``celery -A support beat``."""

from __future__ import annotations

import logging
import os
from typing import Any

import redis
from celery import Celery, Task
from celery.fixups.django import DjangoFixup, DjangoWorkerFixup
from celery.signals import before_task_publish, worker_init
from psycopg.pq import TransactionStatus

from support.pauses import Pause

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


# --- Beat's rounds: only the newest queued of each kind is done -----------------------------------
# Beat sends each round (the sweep every few seconds) whether or not a worker takes them: with every
# worker down for an hour, a thousand sweeps waited in the queue, and the worker that came back ran
# them back to back. Each round sent is numbered, per task, in Redis; a round whose number is below
# the last one sent is passed over: a newer one of its kind is queued behind it (or already ran) and
# does all it would. Not Celery's ``expires``: that is a time on the sending host's clock, read on
# the worker's, and a worker a few seconds ahead of beat would pass over every sweep. Best effort
# like the doorbells: a round that could not be numbered, or whose number cannot be read back, runs.

logger = logging.getLogger(__name__)

ROUND_HEADER = "round_number"
rounds_pause = Pause("round numbers", 5.0)
_rounds_redis: redis.Redis | None = None


def _rounds_client() -> tuple[redis.Redis, str]:
    from django.conf import settings

    global _rounds_redis
    if _rounds_redis is None:
        _rounds_redis = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=3, socket_connect_timeout=3)
    return _rounds_redis, settings.CACHES["default"].get("KEY_PREFIX", "support")


def _beat_rounds() -> set[str]:
    return {entry["task"] for entry in (app.conf.beat_schedule or {}).values()}


@before_task_publish.connect
def _number_a_round(sender: str | None = None, headers: dict[str, Any] | None = None, **kwargs: object) -> None:
    """Every round of a task beat sends (by beat, or asked for at a worker's start) gets the next number."""
    if headers is None or sender not in _beat_rounds() or rounds_pause.paused():
        return
    try:
        client, prefix = _rounds_client()
        headers[ROUND_HEADER] = int(client.incr(f"{prefix}:rounds-sent:{sender}"))
    except redis.RedisError:
        rounds_pause.failed()
        logger.warning("a round of %s could not be numbered: it is done even if a newer one is queued", sender)


def newer_round_queued(task: Task) -> bool:
    """Whether a round of ``task`` newer than the one it runs was sent since (this one is then passed over)."""
    # A worker puts a message's headers on the request; an eager ``apply(headers=...)`` keeps them apart.
    number = task.request.get(ROUND_HEADER, (task.request.get("headers") or {}).get(ROUND_HEADER))
    if not isinstance(number, int) or rounds_pause.paused():
        return False  # called directly, sent before rounds were numbered, or not numbered
    try:
        client, prefix = _rounds_client()
        last = client.get(f"{prefix}:rounds-sent:{task.name}")
    except redis.RedisError:
        rounds_pause.failed()
        return False
    # A count Redis lost (flushed, restarted) reads lower than this round's: it is done.
    return last is not None and int(last) > number


class BeatRound(Task):
    """A task beat sends every round: passed over (returning None) when a newer round of it is queued."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if newer_round_queued(self):
            logger.info("%s: passed over, a newer round of it was sent since", self.name)
            return None
        return super().__call__(*args, **kwargs)


app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
