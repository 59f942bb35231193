"""The web while its database is away: a clear 503 page, never a 500, and back when it returns."""

from __future__ import annotations

import urllib.error
import urllib.request
from urllib.parse import quote

import pytest
from django.db import connection

from tests.workers import TcpProxy, free_port, wait_for_http

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(120)]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return None


_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def get(url: str, *, cookie: str = "") -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with _opener.open(request, timeout=20) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


@pytest.mark.parametrize(
    "connections",
    [
        {},  # the default: connections lent by the web process's pool
        {"DB_CONN_MAX_AGE": "60"},  # kept by each thread, no pool
    ],
    ids=["pooled", "kept"],
)
def test_the_web_answers_503_while_the_database_is_down_and_recovers(cluster, connections):
    settings = connection.settings_dict
    proxy = TcpProxy(settings.get("HOST") or "127.0.0.1", int(settings.get("PORT") or 5432)).up()
    # The web reaches the test database only through the proxy, over TCP on loopback.
    auth = quote(settings.get("USER") or "", safe="")
    if settings.get("PASSWORD"):
        auth += ":" + quote(settings["PASSWORD"], safe="")
    url = f"postgres://{auth}@127.0.0.1:{proxy.port}/{settings['NAME']}"
    port = free_port()
    web = cluster.web(port, DATABASE_URL=url, **connections)
    base = f"http://127.0.0.1:{port}"
    wait_for_http(f"{base}/healthz", timeout=60, proc=web)
    session = "sessionid=0123456789abcdefghijklmnopqrstuv"  # unknown, but looked up in the database
    try:
        assert get(f"{base}/tickets/", cookie=session)[0] == 302  # unknown session: off to the login page

        proxy.down()
        status, body, headers = get(f"{base}/tickets/", cookie=session)
        assert status == 503, (body[:300], web.log()[-3000:])
        assert "back in a moment" in body and "Nothing you sent has been lost" in body
        assert headers.get("Retry-After") == "5"
        # Not stored by the browser (it came with a session), decided without asking the database.
        assert "no-store" in headers.get("Cache-Control", ""), headers
        assert get(f"{base}/healthz")[0] == 503

        proxy.up()
        status, _, _ = get(f"{base}/tickets/", cookie=session)
        assert status == 302  # connected again: the same request works
        assert get(f"{base}/healthz")[0] == 200
    finally:
        proxy.down()
