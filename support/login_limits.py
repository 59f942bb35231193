"""Failed sign-ins counted per address and per account, beside django-axes' lockout of one username
from one address (AXES_FAILURE_LIMIT). That lockout alone let one address try a few passwords on
each of many accounts (password spraying), and many addresses take turns on one account, without
end. Past LOGIN_FAILURE_RATE_PER_ADDRESS failures from an address, or LOGIN_FAILURE_RATE_PER_ACCOUNT
on one username from anywhere, every sign-in from that address or to that account is refused, the
right password too, with the lockout page (429) until the window ends. The limits are set well above
the pair's, so a shared office's typos or a stranger's few guesses lock no customer out."""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

import redis
from axes.handlers.database import AxesDatabaseHandler
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from support.client_ip import client_ip, counted_address
from support.throttle import cache_pause

logger = logging.getLogger(__name__)

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RATE = re.compile(r"(\d+)/(\d*)([smhd])")


def _rate(rate: str) -> tuple[int, int]:
    """(failures, seconds) of a rate as the settings write it: "30/h", "5/10m"."""
    count, multiple, unit = _RATE.fullmatch(rate).groups()  # type: ignore[union-attr]  # checked at start
    return int(count), int(multiple or 1) * _UNIT_SECONDS[unit]


def _username(credentials: dict[str, Any] | None) -> str:
    name = (credentials or {}).get("username")
    return name.strip().lower()[:150] if isinstance(name, str) else ""


_GENERATION = "login.failures.generation"


def _key(kind: str, value: str) -> str:
    # The generation changes when every limit is released at once (a cache cannot list its keys).
    generation = cache.get_or_set(_GENERATION, 0, timeout=None)
    return f"login.failures.{generation}.{kind}.{hashlib.sha256(value.encode()).hexdigest()}"


def _counters(address: str, username: str) -> list[tuple[str, str]]:
    """(cache key, rate) of each limit a sign-in from ``address`` to ``username`` is counted against."""
    counters = [(_key("address", counted_address(address)), settings.LOGIN_FAILURE_RATE_PER_ADDRESS)]
    if username:
        counters.append((_key("account", username), settings.LOGIN_FAILURE_RATE_PER_ACCOUNT))
    return counters


def _over(request: HttpRequest, username: str, *, count: bool) -> bool:
    """Is the address or the account past its limit? ``count``: this is a failure, counted first
    (a window starts with the first failure). With the cache (Redis) away nothing is counted or
    refused (django-axes' lockout still holds)."""
    if cache_pause.paused():
        return False
    over = False
    try:
        for key, rate in _counters(client_ip(request), username):
            limit, seconds = _rate(rate)
            if count:
                cache.add(key, 0, timeout=seconds)
                failures = cache.incr(key)
            else:
                failures = cache.get(key, 0)
            over = over or failures >= limit + (1 if count else 0)
    except (redis.RedisError, ValueError):  # ValueError: the window ended between add and incr
        cache_pause.failed()
        logger.warning("failed sign-ins not counted, the cache could not be reached", exc_info=True)
        return False
    return over


def release(*, address: str | None = None, username: str | None = None) -> None:
    """Forget the failures counted from ``address`` and on ``username``; neither: every one. With the
    cache (Redis) away there is nothing it could refuse meanwhile; said in the log."""
    try:
        if not address and not username:
            cache.set(_GENERATION, int(cache.get(_GENERATION) or 0) + 1, timeout=None)
            return
        keys = []
        if address:
            keys.append(_key("address", counted_address(address)))
        if username:
            keys.append(_key("account", _username({"username": username})))
        cache.delete_many(keys)
    except redis.RedisError:
        logger.warning("failed sign-ins could not be released, the cache could not be reached", exc_info=True)


class LockoutHandler(AxesDatabaseHandler):
    """django-axes' handler, whose releases (``axes_reset``, ``axes_reset_ip``,
    ``axes_reset_username``, the admin) also release the limits per address and per account."""

    def reset_attempts(
        self, *, ip_address: str | None = None, username: str | None = None, ip_or_username: bool = False
    ) -> int:
        count = super().reset_attempts(ip_address=ip_address, username=username, ip_or_username=ip_or_username)
        release(address=ip_address, username=username)
        return count


class SignInLimits:
    """An authentication backend placed after django-axes' and before the one that checks passwords:
    it authenticates nobody (and, with no ``get_user``, is never the one a session is kept by), and
    refuses a sign-in from an address or to an account past its limit, as django-axes refuses one it
    locked out (its middleware answers with the lockout page)."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, **kwargs: Any) -> None:
        if request is None:
            return None
        if _over(request, _username({"username": username, **kwargs}), count=False):
            request.axes_locked_out = True  # type: ignore[attr-defined]
            request.axes_credentials = {"username": username}  # type: ignore[attr-defined]
            raise PermissionDenied("too many failed sign-ins from this address or to this account")
        return None


def _count_failure(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any) -> None:
    if request is not None and not getattr(request, "axes_locked_out", False):
        _over(request, _username(credentials), count=True)


user_login_failed.connect(_count_failure, dispatch_uid="support.login_limits.count_failure")
