"""A worker cut off from PostgreSQL alone in the middle of an answer, while Redis (the broker, live
updates) still reaches it.

It goes on streaming its answer to Redis and receiving doorbells, but it cannot renew its lease:
PostgreSQL sees its session dead (keepalives), the sweeper rings, and a worker on another host takes
the ticket over. When the link comes back, the cut-off worker's writes are refused by the fence: the
customer gets one reply, and the refund is paid once.
"""

from __future__ import annotations

import re

import pytest
import redis
from django.conf import settings

from tests.hosts.stack import PG_PORT, Customer, Stack, an_order_of, wait_worker_ready
from tests.hosts.test_worker_partition import SLOW_TOKENS_MS, agent_replies, refunds_of, run_state
from tests.workers import wait_until

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(150)]


def test_a_worker_cut_off_from_the_database_alone_mid_answer_is_taken_over_and_answers_once(hosts: Stack):
    cut_off_host, other_host = hosts.worker_hosts[2], hosts.worker_hosts[1]
    cut_off = hosts.worker(cut_off_host, OFFLINE_MODEL_TOKEN_DELAY_MS=SLOW_TOKENS_MS)
    hosts.beat()
    wait_worker_ready(cut_off)
    an_order_of(hosts, "alice", "A-1902", 4999)
    alice = Customer(hosts.base_url(hosts.web_hosts[1]), "alice").login()
    ticket_id = alice.open_ticket("Please refund order A-1902", client_ref="db-cut-worker-1")
    buffers = redis.Redis.from_url(hosts.redis_url, socket_timeout=5)
    wait_until(
        lambda: buffers.exists(f"{settings.CHANNELS_PREFIX}:stream:{ticket_id}"),
        timeout=60,
        what="the answer to start streaming",
    )
    (stale_epoch, stale_expiry), *_ = hosts.sql(
        "SELECT epoch, expires_at FROM agents_ticketlease WHERE ticket_id = %s", ticket_id
    )

    hosts.net.block(cut_off_host, hosts.db, port=PG_PORT)  # Redis, the broker, stays reachable
    other = hosts.worker(other_host)
    wait_worker_ready(other)
    wait_until(lambda: run_state(hosts, ticket_id)[0] == "completed", timeout=60, what="the other worker's reply")
    (taken_over_at,), *_ = hosts.sql(
        "SELECT created_at FROM tickets_ticketevent WHERE ticket_id = %s AND kind = 'agent_run_recovered'", ticket_id
    )
    assert taken_over_at < stale_expiry  # the dead session was seen, not the lease's expiry waited out

    seen = len(cut_off.log())
    hosts.net.unblock(cut_off_host, hosts.db, port=PG_PORT)
    wait_until(
        lambda: re.search(r"advance_ticket\[[^]]+\] (succeeded|raised)", cut_off.log()[seen:]) or not cut_off.alive(),
        timeout=90,
        what="the cut-off worker to finish its answer",
    )

    replies = agent_replies(hosts, ticket_id)
    assert len(replies) == 1 and "A-1902" in replies[0], replies
    status, failures, epochs = run_state(hosts, ticket_id)
    assert status == "completed" and failures == 0, (status, failures)
    assert epochs[0] == stale_epoch and len(epochs) == 2, epochs
    refunds = refunds_of(hosts, "A-1902")
    assert len(refunds) == 1 and refunds[0]["amount"] == 4999, refunds
    alice.close()
