"""The rate limits' cache (Redis) stalls: connections accepted, nothing comes back (a frozen server, a
host cut off without a reset). Each customer's send or new ticket counted itself against its limit
first, and each waited out the cache's timeout before it was stored: every request for as long as
the stall lasted. After one failure the cache is not asked for a few seconds (``support.pauses``);
counted here as the connections the stalled server is asked for."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.cache import caches
from django.test import RequestFactory

from support.throttle import cache_pause, over_limit
from tests.conftest import silent_server


@pytest.fixture
def stalled_cache(settings):  # noqa: ANN001, ANN201
    with silent_server(backlog=16) as (port, accepted):
        settings.CACHES = {
            "default": {
                **settings.CACHES["default"],
                "LOCATION": f"redis://127.0.0.1:{port}/0",
                "OPTIONS": {**settings.CACHES["default"]["OPTIONS"], "socket_timeout": 1, "socket_connect_timeout": 1},
            }
        }
        caches["default"].close()
        yield accepted


def test_a_stalled_cache_holds_one_request_and_lets_the_next_ones_through_at_once(stalled_cache):  # noqa: ANN001
    requests = []
    for n in range(3):
        request = RequestFactory().post(f"/tickets/{n}/messages", REMOTE_ADDR="203.0.113.7")
        request.user = AnonymousUser()
        requests.append(request)

    waits = [over_limit(r, group="tickets.message", key="ip", rate_setting="CUSTOMER_MESSAGE_RATE") for r in requests]

    assert waits == [None, None, None]  # not counted, never refused
    assert cache_pause.paused()
    # The first asked the stalled cache (and waited out its timeout); the next two did not ask it.
    assert len(stalled_cache) == 1, f"{len(stalled_cache)} connections to a cache that never answers"
