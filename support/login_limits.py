"""Failed sign-ins counted per address and per account, beside django-axes' lockout of one username
from one address (AXES_FAILURE_LIMIT). That lockout alone let one address try a few passwords on
each of many accounts (password spraying), and many addresses take turns on one account, without
end. Past LOGIN_FAILURE_RATE_PER_ADDRESS failures from an address, or LOGIN_FAILURE_RATE_PER_ACCOUNT
on one username from anywhere, every sign-in from that address or to that account is refused, the
right password too, with the lockout page (429) until the window ends. The limits are set well above
the pair's, so a shared office's typos or a stranger's few guesses lock no customer out."""

from __future__ import annotations

import logging
from typing import Any

import redis
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django_ratelimit.core import get_usage

from support.client_ip import client_ip
from support.throttle import cache_pause

logger = logging.getLogger(__name__)

GROUP_ADDRESS = "login.failures.address"
GROUP_ACCOUNT = "login.failures.account"


def _username(credentials: dict[str, Any] | None) -> str:
    name = (credentials or {}).get("username")
    return name.strip().lower()[:150] if isinstance(name, str) else ""


def _over(request: HttpRequest, username: str, *, count: bool) -> bool:
    """Is the address or the account past its limit? ``count``: this is a failure, counted first.
    With the cache (Redis) away nothing is counted or refused (django-axes' lockout still holds)."""
    from django.conf import settings

    if cache_pause.paused():
        return False
    limits = [(GROUP_ADDRESS, client_ip(request), settings.LOGIN_FAILURE_RATE_PER_ADDRESS)]
    if username:
        limits.append((GROUP_ACCOUNT, username, settings.LOGIN_FAILURE_RATE_PER_ACCOUNT))
    over = False
    for group, value, rate in limits:
        try:
            usage = get_usage(request, group=group, key=lambda _group, _request, v=value: v, rate=rate, increment=count)
        except redis.RedisError:
            cache_pause.failed()
            logger.warning("failed sign-ins not counted, the cache could not be reached", exc_info=True)
            return False
        # Counted, a failure is over once past the limit; looked at before a try, once at it.
        if usage is not None and usage["count"] >= usage["limit"] + (1 if count else 0):
            over = True
    return over


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
