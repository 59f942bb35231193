from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET


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


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """Database, Redis and worker status. 200 when the database and Redis answer."""
    body = {"database": _check_database(), "redis": _check_redis(), "worker": _check_workers()}
    healthy = body["database"]["ok"] and body["redis"]["ok"]
    body["status"] = "ok" if healthy else "unavailable"
    return JsonResponse(body, status=200 if healthy else 503)
