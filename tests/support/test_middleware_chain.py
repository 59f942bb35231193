"""Under ASGI (daphne), a request crosses between the event loop and the sync thread a few times,
not once or twice per middleware (support.settings.MIDDLEWARE: the innermost middleware is
synchronous only, so Django runs the whole chain above it in sync mode)."""

from __future__ import annotations

import pytest
from asgiref.sync import SyncToAsync, async_to_sync
from django.test import AsyncClient

pytestmark = pytest.mark.django_db


def test_a_page_under_asgi_switches_to_the_sync_thread_a_few_times_not_per_middleware(monkeypatch):
    switches: list[str] = []
    original = SyncToAsync.__call__

    async def counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        switches.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    client = AsyncClient()

    response = async_to_sync(client.get)("/accounts/login/", secure=True)

    assert response.status_code == 200 and b"csrfmiddlewaretoken" in response.content
    # Django's own: the request_started signal, the chain (entered once), the CSRF check before the
    # view, the view, rendering its template, closing the response. Sixteen when each middleware
    # ran its request and its response step in the thread one at a time.
    assert len(switches) <= 6, switches
