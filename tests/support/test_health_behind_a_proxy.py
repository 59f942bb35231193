"""Behind a TLS-terminating proxy on the same host every request reaches the web server from
127.0.0.1: a request a proxy forwarded (its headers say so), or any request once
SECURE_PROXY_SSL_HEADER says a proxy is in front, is not "a check run on this host", so a stranger
gets only the status, not the health details (errors, worker host names). A plain check on the host
still gets them."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_a_stranger_proxied_by_a_local_tls_proxy_gets_only_the_status(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    stranger = Client()

    body = stranger.get(
        "/healthz",
        REMOTE_ADDR="127.0.0.1",  # the proxy on this host
        HTTP_X_FORWARDED_FOR="203.0.113.9",  # the stranger, as the proxy forwards them
        HTTP_X_FORWARDED_PROTO="https",
    ).json()

    assert body == {"status": "ok"}, f"a stranger behind the proxy sees the details: {sorted(body)}"


@pytest.mark.parametrize("forwarded", [{"HTTP_X_FORWARDED_FOR": "203.0.113.9"}, {"HTTP_FORWARDED": "for=203.0.113.9"}])
def test_a_request_forwarded_by_a_proxy_is_not_a_local_check(forwarded):  # noqa: ANN001
    body = Client().get("/healthz", REMOTE_ADDR="127.0.0.1", **forwarded).json()
    assert body == {"status": "ok"}, sorted(body)


def test_a_check_run_on_this_host_gets_the_details():
    body = Client().get("/healthz", REMOTE_ADDR="127.0.0.1").json()
    assert {"database", "redis", "worker", "status"} <= set(body)
