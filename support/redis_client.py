"""One Redis client per process and purpose, made at first use from REDIS_URL (not at import: the
settings may be overridden until then, and a process that never needs it never connects).

redis-py's client is safe to share between threads, and its pool starts afresh in a forked child
(Celery's prefork pool), so one per module is enough.
"""

from __future__ import annotations

import redis
from django.conf import settings


class LazyRedis:
    """Call it for the client: ``_client = LazyRedis(timeout=2)`` then ``_client().get(...)``.
    ``timeout`` bounds both connecting and each command, in seconds: a Redis that stalls costs the
    caller at most that. ``client`` is the one made so far (None before the first call; set it to
    None to have the next call make a new one)."""

    def __init__(self, *, timeout: float) -> None:
        self.timeout = timeout
        self.client: redis.Redis | None = None

    def __call__(self) -> redis.Redis:
        if self.client is None:
            self.client = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=self.timeout, socket_connect_timeout=self.timeout
            )
        return self.client
