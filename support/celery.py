"""The Celery application. Workers: ``celery -A support worker``; beat: ``celery -A support beat``."""

from __future__ import annotations

import logging
import os
from typing import Any

import redis
from celery import Celery, Task
from celery.fixups.django import DjangoFixup, DjangoWorkerFixup
from celery.signals import after_task_publish, before_task_publish, worker_init
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
# A round counts as sent once the broker took it: beat on a host cut from the broker (Redis, where
# the numbers are kept, still reached) numbered every round it tried, and the rounds queued before,
# a worker's start sweep among them, were passed over for rounds that never reached the queue.

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


# The next number, above every round sent (a count of numbers Redis lost starts again past them).
# KEYS: the numbers given, the last round sent.
_NEXT_NUMBER = """
local n = redis.call('INCR', KEYS[1])
local sent = tonumber(redis.call('GET', KEYS[2]) or '0')
if n <= sent then
  n = sent + 1
  redis.call('SET', KEYS[1], n)
end
return n
"""
# A round the broker took: the last sent is the highest number taken (two senders may finish out of
# order). KEYS: the last round sent; ARGV: this round's number.
_SENT = """
if tonumber(ARGV[1]) > tonumber(redis.call('GET', KEYS[1]) or '0') then
  redis.call('SET', KEYS[1], ARGV[1])
end
"""


def _round_keys(prefix: str, task_name: str) -> tuple[str, str]:
    """(the numbers given to rounds of ``task_name``, the number of the last one the broker took)."""
    return f"{prefix}:rounds-numbered:{task_name}", f"{prefix}:rounds-sent:{task_name}"


@before_task_publish.connect
def _number_a_round(sender: str | None = None, headers: dict[str, Any] | None = None, **kwargs: object) -> None:
    """Every round of a task beat sends (by beat, or asked for at a worker's start) gets the next number."""
    if headers is None or sender not in _beat_rounds() or rounds_pause.paused():
        return
    try:
        client, prefix = _rounds_client()
        headers[ROUND_HEADER] = int(client.eval(_NEXT_NUMBER, 2, *_round_keys(prefix, sender)))
    except redis.RedisError:
        rounds_pause.failed()
        logger.warning("a round of %s could not be numbered: it is done even if a newer one is queued", sender)


@after_task_publish.connect
def _round_sent(sender: str | None = None, headers: dict[str, Any] | None = None, **kwargs: object) -> None:
    """A numbered round the broker took is the newest sent of its kind, if none with a higher number was."""
    number = (headers or {}).get(ROUND_HEADER)
    if sender not in _beat_rounds() or not isinstance(number, int) or rounds_pause.paused():
        return
    try:
        client, prefix = _rounds_client()
        client.eval(_SENT, 1, _round_keys(prefix, sender)[1], number)
    except redis.RedisError:
        rounds_pause.failed()
        logger.warning("round %s of %s was sent but not counted: the rounds before it are done", number, sender)


def newer_round_queued(task: Task) -> bool:
    """Whether a round of ``task`` newer than the one it runs was sent since (this one is then passed over)."""
    # A worker puts a message's headers on the request; an eager ``apply(headers=...)`` keeps them apart.
    number = task.request.get(ROUND_HEADER, (task.request.get("headers") or {}).get(ROUND_HEADER))
    if not isinstance(number, int) or rounds_pause.paused():
        return False  # called directly, sent before rounds were numbered, or not numbered
    try:
        client, prefix = _rounds_client()
        last = client.get(_round_keys(prefix, task.name)[1])
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
