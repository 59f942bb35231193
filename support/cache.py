"""Redis connections of Django's cache, shared by every thread of a process."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import redis


class SharedConnectionPool(redis.ConnectionPool):
    """One pool per Redis URL and options for the whole process.

    Django's Redis cache makes a connection pool per cache object, and a cache object per thread
    (or per request context): under ASGI, where Django runs each request in a thread of its own,
    every request that touched the cache (a rate limit, a login lockout) opened a new connection
    to Redis and said hello before its first command. redis-py's pool is thread-safe, and starts
    afresh in a forked child by itself.
    """

    _shared: ClassVar[dict[tuple[str, tuple[tuple[str, Any], ...]], SharedConnectionPool]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> SharedConnectionPool:
        key = (url, tuple(sorted(kwargs.items())))
        with cls._lock:
            pool = cls._shared.get(key)
            if pool is None:
                pool = cls._shared[key] = super().from_url(url, **kwargs)
            return pool
