"""PostgreSQL cut off from one web server: that server answers 503 at once and recovers; the other serves on.

Only the link between ``web1`` and PostgreSQL is cut (Redis, the other web server and everything
else still reach it). ``web1`` opens a database connection per request (``DB_CONN_MAX_AGE=0``,
the default), so a request waits at most ``DB_CONNECT_TIMEOUT`` (5 s) for a host that does not
answer before the customer reads the "back in a moment" page; without a connect timeout the
kernel would try for two minutes.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.hosts.stack import PG_PORT, Customer, Stack, wait_worker_ready
from tests.workers import wait_until

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(120)]


def test_a_web_server_cut_off_from_the_database_answers_503_and_the_other_serves_on(hosts: Stack):
    cut_web, other_web = hosts.web_hosts
    worker = hosts.worker(hosts.worker_hosts[2])
    alice = Customer(hosts.base_url(cut_web), "alice").login()
    bob = Customer(hosts.base_url(other_web), "bob").login()
    assert alice.client.get("/tickets/").status_code == 200

    hosts.net.block(cut_web, hosts.db, port=PG_PORT)
    started = time.monotonic()
    # A client that gives up after 15 s: a server that hangs on the silent database fails here.
    page = alice.client.get("/tickets/", timeout=15)
    waited = time.monotonic() - started
    assert page.status_code == 503, page.text[:300]
    assert "back in a moment" in page.text and "Nothing you sent has been lost" in page.text
    assert page.headers["Retry-After"] == "5"
    assert httpx.get(f"{hosts.base_url(cut_web)}/healthz", timeout=15, trust_env=False).status_code == 503

    # Meanwhile the other web server serves: a customer opens a ticket there and is answered.
    assert bob.client.get("/tickets/").status_code == 200
    wait_worker_ready(worker)
    ticket_id = bob.open_ticket("Where is my order B-2001?", client_ref="web-partition-bob")
    wait_until(
        lambda: (
            hosts.sql("SELECT count(*) FROM tickets_message WHERE ticket_id = %s AND author_kind = 'agent'", ticket_id)
            == [(1,)]
        ),
        timeout=30,
        what="bob's answer through the other web server",
    )

    hosts.net.unblock(cut_web, hosts.db, port=PG_PORT)
    wait_until(lambda: alice.client.get("/tickets/").status_code == 200, timeout=15, what="web1 to serve again")
    assert httpx.get(f"{hosts.base_url(cut_web)}/healthz", timeout=15, trust_env=False).status_code == 200
    print(f"web1 answered 503 after {waited:.2f} s with its database cut off")  # noqa: T201
    alice.close()
    bob.close()
