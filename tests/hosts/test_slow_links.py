"""Slow, lossy links between the workers and PostgreSQL: everything still completes, once.

Every packet between a worker host and PostgreSQL is held 100 ms each way (each round trip takes
200 ms longer, as ``netem delay 200ms`` on one side of a link would make it) and 1 in 100 is
dropped each way. Redis, the web servers and the provider are reached at full speed. The
workers answer order questions and pay a refund meanwhile, at the product's default settings:
the lease's heartbeat, the keepalives and the fence must all ride over the delay and the
retransmissions without a take-over, a repeat or a lost answer.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.hosts.stack import PG_PORT, ROOT, Customer, Stack, wait_worker_ready
from tests.workers import wait_until

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(180)]

DELAY_MS, LOSS_PERCENT = 100, 1

ROUND_TRIP = """
import sys, time, psycopg
with psycopg.connect(sys.argv[1], connect_timeout=10) as conn:
    conn.execute("SELECT 1")
    started = time.monotonic()
    for _ in range(5):
        conn.execute("SELECT 1").fetchone()
    print((time.monotonic() - started) / 5 * 1000)
"""


def round_trip_ms(stack: Stack, host_index: int) -> float:
    host = stack.worker_hosts[host_index]
    out = subprocess.run(
        host.argv(sys.executable, "-c", ROUND_TRIP, stack.database_url),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return float(out.stdout.strip())


def test_slow_lossy_links_to_the_database_still_answer_everything_once(hosts: Stack):
    for host in hosts.worker_hosts[:2]:
        hosts.net.slow(host, hosts.db, port=PG_PORT, delay_ms=DELAY_MS, loss_percent=LOSS_PERCENT)
    assert round_trip_ms(hosts, 0) >= 2 * DELAY_MS  # the link is slow indeed (the harness works)
    workers = [hosts.worker(host) for host in hosts.worker_hosts[:2]]
    hosts.beat()
    for proc in workers:
        wait_worker_ready(proc, timeout=120)
    customers = {
        name: Customer(hosts.base_url(web), name).login()
        for web, name in zip(hosts.web_hosts * 2, ["alice", "bob", "carol"], strict=False)
    }
    asks = [
        ("bob", "Where is my order B-2001?"),
        ("carol", "Where is my order C-3001?"),
        ("alice", "Please refund order A-1001"),
        ("bob", "What is your refund policy?"),
    ]
    tickets = [customers[name].open_ticket(body, client_ref=f"slow-{n}") for n, (name, body) in enumerate(asks)]

    def answered() -> dict[int, int]:
        rows = hosts.sql(
            "SELECT t.id, count(m.id) FROM tickets_ticket t LEFT JOIN tickets_message m ON m.ticket_id = t.id "
            "AND m.author_kind = 'agent' AND m.is_public WHERE t.id = ANY(%s) GROUP BY t.id",
            tickets,
        )
        return dict(rows)

    wait_until(lambda: set(answered().values()) == {1}, timeout=120, what="every ticket answered over slow links")
    runs = hosts.sql(
        "SELECT ticket_id, status, failures, jsonb_array_length(epochs) FROM agents_agentrun "
        "WHERE ticket_id = ANY(%s) ORDER BY ticket_id",
        tickets,
    )
    assert runs == [(t, "completed", 0, 1) for t in sorted(tickets)]  # no failure, no take-over
    refund_ticket = tickets[2]
    refunds = [r for r in hosts.provider_refunds() if r["payment_intent"] == "pi_demo_A-1001"]
    assert [r["amount"] for r in refunds] == [2900]
    ours = hosts.sql("SELECT provider_refund_id FROM agents_refund WHERE ticket_id = %s", refund_ticket)
    assert ours == [(refunds[0]["id"],)]
    for customer in customers.values():
        customer.close()
