"""Rate limits over the shared cache (django-ratelimit): over the limit, 429 with Retry-After."""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django_ratelimit.core import get_usage

from support.pauses import Pause

logger = logging.getLogger(__name__)

cache_pause = Pause("the rate limits' cache", 5.0)


def over_limit(request: HttpRequest, *, group: str, key: str | Callable[..., str], rate_setting: str) -> int | None:
    """Count this request against ``group``'s limit; None if within it, else seconds until it resets.

    ``key`` is django-ratelimit's: ``"user"``, ``"ip"``, ``"post:email"``...
    """
    # The cache (Redis) is away: the request is not counted rather than refused or failed with a 500.
    # A customer's message or new ticket is stored in PostgreSQL and answered once Redis is back; a
    # limit left uncounted for the length of an outage costs far less than a lost message. After a
    # failure the cache is not asked for a few seconds: a stalled Redis holds one request, not each.
    if cache_pause.paused():
        logger.warning("%s: not counted against its rate limit, the cache failed a moment ago", group)
        return None
    try:
        usage = get_usage(request, group=group, key=key, rate=getattr(settings, rate_setting), increment=True)
    except redis.RedisError:
        cache_pause.failed()
        logger.warning("%s: not counted against its rate limit, the cache could not be reached", group, exc_info=True)
        return None
    if usage is None or not usage["should_limit"]:
        return None
    return max(1, int(usage["time_left"]))


def too_many(retry_after: int, message: str, *, json: bool) -> HttpResponse:
    response: HttpResponse
    if json:
        response = JsonResponse({"error": message, "retry_after": retry_after}, status=429)
    else:
        response = HttpResponse(message, status=429, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(retry_after)
    return response
