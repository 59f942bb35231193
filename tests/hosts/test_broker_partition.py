"""The broker cut off from every worker: no work is lost, and the sweeper rings again when it returns.

Redis is the broker (and the Channels layer) on the ``db`` host. For ``BROKER_CUT_SECONDS``
(10 s by default to keep CI quick; the issue's 30 s with ``HOSTS_BROKER_CUT_SECONDS=30``) the
workers cannot reach it, while the web servers and beat still can and PostgreSQL stays
reachable for everyone. Customers open tickets on both web servers meanwhile, and the doorbells
queued for them are dropped at the broker too (as a broker that fails over without its queue
would), so only the sweeper can bring those tickets back.
"""

from __future__ import annotations

import os
import time

import pytest
import redis

from tests.hosts.stack import REDIS_PORT, Customer, Stack, wait_worker_ready
from tests.workers import wait_until

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(120 + 2 * int(os.environ.get("HOSTS_BROKER_CUT_SECONDS", 10)))]

BROKER_CUT_SECONDS = float(os.environ.get("HOSTS_BROKER_CUT_SECONDS", 10))
QUESTIONS = {
    "alice": "Where is my order A-1001?",
    "bob": "Where is my order B-2001?",
    "carol": "Where is my order C-3001?",
}


def answered(stack: Stack, ticket_ids: list[int]) -> dict[int, int]:
    rows = stack.sql(
        "SELECT t.id, count(m.id) FROM tickets_ticket t LEFT JOIN tickets_message m ON m.ticket_id = t.id "
        "AND m.author_kind = 'agent' AND m.is_public WHERE t.id = ANY(%s) GROUP BY t.id",
        ticket_ids,
    )
    return dict(rows)


def test_a_broker_cut_off_from_every_worker_loses_no_work(hosts: Stack):
    workers = [hosts.worker(host) for host in hosts.worker_hosts[:2]]
    hosts.beat()
    for proc in workers:
        wait_worker_ready(proc)
    customers = [
        Customer(hosts.base_url(web), name).login() for web, name in zip(hosts.web_hosts * 2, QUESTIONS, strict=False)
    ]
    tickets = [c.open_ticket(QUESTIONS[c.username], client_ref=f"broker-before-{c.username}") for c in customers]
    wait_until(lambda: set(answered(hosts, tickets).values()) == {1}, timeout=60, what="the first tickets answered")

    for host in hosts.worker_hosts[:2]:
        hosts.net.block(host, hosts.db, port=REDIS_PORT)
    cut_at = time.monotonic()
    during = [
        c.open_ticket(QUESTIONS[c.username], client_ref=f"broker-during-{c.username}-{n}")
        for n in range(2)
        for c in customers
    ]
    broker = redis.Redis.from_url(hosts.redis_url)
    time.sleep(max(0.0, BROKER_CUT_SECONDS / 2 - (time.monotonic() - cut_at)))
    broker.delete("celery")  # the doorbells rung so far are gone with the broker's queue
    assert set(answered(hosts, during).values()) == {0}  # nothing was answered while cut off
    time.sleep(max(0.0, BROKER_CUT_SECONDS - (time.monotonic() - cut_at)))
    hosts.net.heal_all()

    wait_until(
        lambda: set(answered(hosts, tickets + during).values()) == {1},
        timeout=60,
        what="every ticket answered after the broker came back",
    )
    time.sleep(2)  # duplicate doorbells (the sweeper's, the web's) drain: still one answer each
    assert answered(hosts, tickets + during) == {t: 1 for t in tickets + during}
    runs = hosts.sql(
        "SELECT ticket_id, count(*), bool_and(status = 'completed') FROM agents_agentrun "
        "WHERE ticket_id = ANY(%s) GROUP BY ticket_id",
        during,
    )
    assert sorted(runs) == [(t, 1, True) for t in sorted(during)]
    twice = hosts.sql(
        "SELECT count(*) FROM (SELECT run_id, index FROM agents_modelstep WHERE ticket_id = ANY(%s) "
        "AND status = 'completed' GROUP BY run_id, index HAVING count(*) > 1) AS repeated",
        during,
    )
    assert twice == [(0,)]
    for customer in customers:
        customer.close()
