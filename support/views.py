from __future__ import annotations

import sys
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.views import PasswordChangeView, PasswordResetView
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET

from support.forms import ThrottledPasswordChangeForm
from support.throttle import over_limit, too_many

# How long a browser or load balancer should wait before asking again while the database is away.
RETRY_AFTER_SECONDS = 5


def _check_database() -> dict[str, object]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # noqa: BLE001 - a health check reports any failure
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "vendor": connection.vendor}


def _check_redis() -> dict[str, object]:
    import redis

    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        client.ping()
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "error": str(exc)}
    return {"ok": True}


def _check_workers() -> dict[str, object]:
    from support.celery import app

    try:
        replies = app.control.ping(timeout=1.0) or []
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "error": str(exc), "workers": []}
    names = sorted(name for reply in replies for name in reply)
    return {"ok": bool(names), "workers": names}


# Headers a proxy adds for the client it forwards: a request with any of them came from elsewhere,
# whatever address it reached this server from (a proxy on this host connects from 127.0.0.1).
_FORWARDED = (
    "HTTP_X_FORWARDED_FOR",
    "HTTP_X_REAL_IP",
    "HTTP_FORWARDED",
    "HTTP_X_FORWARDED_PROTO",
    "HTTP_X_FORWARDED_HOST",
)


def _from_this_host(request: HttpRequest) -> bool:
    """A check run on this host: from a loopback address, forwarded by no proxy. Behind a proxy on the
    same host that adds none of these headers, every visitor would look local: set SECURE_PROXY_SSL_HEADER
    (the README's HTTPS setup), and none is taken for local."""
    if request.META.get("REMOTE_ADDR") not in {"127.0.0.1", "::1"}:
        return False
    return not any(request.META.get(name) for name in _FORWARDED) and not settings.SECURE_PROXY_SSL_HEADER


def _may_see_details(request: HttpRequest) -> bool:
    """Details (errors, worker host names) for staff and for checks run on this host only."""
    if _from_this_host(request):
        return True
    try:
        return bool(request.user.is_authenticated and request.user.is_staff)
    except Exception:  # noqa: BLE001 - the session lives in the database, which may be what is down
        return False


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """200 when the database and Redis answer, 503 when not. Anyone gets the status; staff and
    local checks also get each part's state and the workers' names."""
    body = {"database": _check_database(), "redis": _check_redis()}
    healthy = body["database"]["ok"] and body["redis"]["ok"]
    status = 200 if healthy else 503
    if not _may_see_details(request):
        return JsonResponse({"status": "ok" if healthy else "unavailable"}, status=status)
    body["worker"] = _check_workers()
    body["status"] = "ok" if healthy else "unavailable"
    return JsonResponse(body, status=status)


class ThrottledPasswordResetView(PasswordResetView):
    """Django's password reset, with requests limited per address asked for and per client address."""

    def post(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        email = str(request.POST.get("email", "")).strip().lower()
        per_ip = over_limit(request, group="password_reset.ip", key="ip", rate_setting="PASSWORD_RESET_RATE_PER_IP")
        per_email = over_limit(
            request,
            group="password_reset.email",
            key=lambda group, req: email,
            rate_setting="PASSWORD_RESET_RATE_PER_EMAIL",
        )
        wait = per_ip or per_email
        if wait is not None:
            return too_many(wait, f"Too many password reset requests; please try again in {wait} s.", json=False)
        return super().post(request, *args, **kwargs)


class ThrottledPasswordChangeView(PasswordChangeView):
    """Django's password change, whose current password counts as a sign-in attempt
    (``support.forms.ThrottledPasswordChangeForm``, which needs the request)."""

    form_class = ThrottledPasswordChangeForm

    def get_form_kwargs(self) -> dict[str, Any]:
        return {**super().get_form_kwargs(), "request": self.request}


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 handler: a database that cannot be reached (down, restarting, cut off) is a 503
    with a page that says so and a Retry-After, not an error. Rendered without the request's
    context, so it needs neither the session nor the user (both live in that database)."""
    exc = sys.exc_info()[1]
    unavailable = isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DatabaseError) and "connection" in str(exc).lower()
    )
    if unavailable:
        # The broken connection is dropped, so the next request connects afresh.
        connection.close_if_unusable_or_obsolete()
        response = HttpResponse(render_to_string("503.html"), status=503)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    return HttpResponse(render_to_string("500.html"), status=500)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: a form sent from a page older than the browser's sign-in (signed in again in
    another tab, so the token changed; or the session ended) is refused, and the page says so in the
    product's words, with a way back to the page it came from, instead of Django's bare "CSRF
    verification failed". Nothing of what was posted is shown or offered to send again: that would
    hand a forged request the very step the check refuses. A JSON request (the chat's message, its
    confirmation buttons) is answered in JSON, as those endpoints' other refusals are."""
    if "json" in (request.content_type or "") or "json" in request.headers.get("Accept", ""):
        return JsonResponse(
            {
                "error": "Nothing was done: the page was opened before your sign-in changed (or its cookie is "
                "gone). To keep your account safe, reload the page, then send it again.",
                "code": "csrf",
            },
            status=403,
        )
    return render(request, "403_csrf.html", {"back": _same_origin_referer(request) or "/"}, status=403)


def _same_origin_referer(request: HttpRequest) -> str:
    """The page the form was on (path and query), when the Referer names this site; else empty."""
    referer = request.headers.get("Referer", "")
    try:
        host = request.get_host()
    except Exception:  # noqa: BLE001 - DisallowedHost: no page of ours to go back to
        return ""
    if not referer or not url_has_allowed_host_and_scheme(
        referer, allowed_hosts={host}, require_https=request.is_secure()
    ):
        return ""
    parts = urlsplit(referer)
    if not parts.netloc or not parts.path.startswith("/"):
        return ""
    try:
        page = _PAGE_OF_POST_ONLY.get(resolve(parts.path).view_name)
    except Resolver404:
        page = None
    if page is not None:
        # A page rendered in answer to a form (the dashboard, after a decision it refused) stands at
        # the form's own address, which answers only POST: back leads to the page itself.
        return reverse(page)
    back = parts.path + (f"?{parts.query}" if parts.query else "")
    # A path of this site can read as another site's address once it is a link ("//evil.example/",
    # "/\\evil.example/": browsers read a backslash as a slash): the start, then.
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={host}, require_https=request.is_secure()):
        return ""
    return back


# Addresses that answer only POST but render a page in answer (their Referer then names them).
_PAGE_OF_POST_ONLY = {"approvals:decide": "approvals:dashboard"}
