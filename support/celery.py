"""The Celery application. Workers: ``celery -A support worker``; beat: ``celery -A support beat``."""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import redis
from celery import Celery, Task, bootsteps
from celery.fixups.django import DjangoFixup, DjangoWorkerFixup
from celery.schedules import schedule as celery_schedule
from celery.signals import after_task_publish, before_task_publish, worker_init
from psycopg.pq import TransactionStatus

from support.pauses import Pause

if TYPE_CHECKING:
    from celery.worker.consumer import Consumer

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
# order), and a round of its kind was sent lately (``RoundsWhileBeatIsDown``). KEYS: the last round
# sent, sent lately; ARGV: this round's number, the seconds a round sent counts as lately.
_SENT = """
if tonumber(ARGV[1]) > tonumber(redis.call('GET', KEYS[1]) or '0') then
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
"""


def _round_keys(prefix: str, task_name: str) -> tuple[str, str]:
    """(the numbers given to rounds of ``task_name``, the number of the last one the broker took)."""
    return f"{prefix}:rounds-numbered:{task_name}", f"{prefix}:rounds-sent:{task_name}"


def _sent_lately_key(prefix: str, task_name: str) -> str:
    """Set while a round of ``task_name`` was sent within the last few of its intervals."""
    return f"{prefix}:rounds-sent-lately:{task_name}"


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
        lately = _sent_lately_seconds(sender)
        client.eval(_SENT, 2, _round_keys(prefix, sender)[1], _sent_lately_key(prefix, sender), number, lately)
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


# --- Beat's rounds sent by the workers while beat is down --------------------------------------------
# Beat is one process. A worker sweeps when it connects to the broker, and otherwise left the rounds to
# beat: with beat down, a doorbell or a retry held by a worker killed while another kept running came
# back only after the broker's visibility timeout (an hour on Redis), and meanwhile the ticket waited.
# Now each worker looks, every interval of each round, whether a round of its kind was sent within the
# last few intervals (by beat, or a worker), and sends one when none was. One worker of many sends it:
# the look is a SET NX with expiry in Redis, the one cheap call per interval and worker, and the round
# sent sets the same key. Best effort: with Redis out of reach, beat's rounds go on alone.

ROUND_INTERVALS_MISSED = 3  # beat's rounds missing this many intervals in a row: a worker sends one
QUIET_TOLD_EVERY_SECONDS = 600.0
_quiet_told_at: dict[str, float] = {}  # when this worker last told it sent a round of the kind


def _round_seconds(schedule: object) -> float | None:
    """The interval of a round beat sends every so many seconds (None: on a calendar, a crontab)."""
    if isinstance(schedule, int | float):
        return float(schedule)
    if isinstance(schedule, celery_schedule):
        schedule = schedule.run_every
    return schedule.total_seconds() if isinstance(schedule, timedelta) else None


def _rounds_every() -> dict[str, float]:
    """Beat's rounds sent every so many seconds: task name -> its interval."""
    rounds = {}
    for entry in (app.conf.beat_schedule or {}).values():
        seconds = _round_seconds(entry.get("schedule"))
        if seconds:
            rounds[entry["task"]] = max(seconds, 1.0)
    return rounds


def _sent_lately_seconds(task_name: str) -> int:
    """How long a round sent counts as lately: a few of its intervals."""
    return max(1, round(ROUND_INTERVALS_MISSED * _rounds_every().get(task_name, 1.0)))


def send_round_if_beat_is_quiet(task_name: str) -> bool:
    """Send a round of ``task_name`` when none was sent lately; whether it was sent. Of many workers
    looking at once, the one that sets the key sends it, and no other does for as long."""
    if rounds_pause.paused():
        return False
    try:
        client, prefix = _rounds_client()
        if not client.set(_sent_lately_key(prefix, task_name), "worker", nx=True, ex=_sent_lately_seconds(task_name)):
            return False
    except redis.RedisError:
        rounds_pause.failed()
        logger.warning("whether beat sent %s lately could not be read: left to beat", task_name)
        return False
    level = logging.INFO  # a warning every few minutes, not every round
    if time.monotonic() - _quiet_told_at.get(task_name, -QUIET_TOLD_EVERY_SECONDS) >= QUIET_TOLD_EVERY_SECONDS:
        _quiet_told_at[task_name], level = time.monotonic(), logging.WARNING
    logger.log(level, "%s: no round of it was sent lately (is beat down?); this worker sends one", task_name)
    app.send_task(task_name, retry=False)
    return True


class RoundsWhileBeatIsDown(bootsteps.StartStopStep):
    """A worker sends beat's rounds itself when beat sent none lately (``send_round_if_beat_is_quiet``),
    each looked at every interval of its own on the consumer's timer. A consumer's step: its timers
    stop while the worker has lost the broker, and start again when it is back."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def __init__(self, c: Consumer, **kwargs: Any) -> None:
        self.timers: list[Any] = []
        super().__init__(c, **kwargs)

    def start(self, c: Consumer) -> None:
        for task_name, seconds in _rounds_every().items():
            self.timers.append(c.timer.call_repeatedly(seconds, self._look, args=(task_name,)))

    def stop(self, c: Consumer) -> None:
        for timer in self.timers:
            c.timer.cancel(timer)
        self.timers = []

    shutdown = stop

    @staticmethod
    def _look(task_name: str) -> None:
        try:
            send_round_if_beat_is_quiet(task_name)
        except Exception:  # noqa: BLE001 - kombu's and the transport's errors alike; the next look tries again
            logger.exception("a round of %s could not be sent while beat is quiet", task_name)


app.steps["consumer"].add(RoundsWhileBeatIsDown)

app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
