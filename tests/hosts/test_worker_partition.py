"""A worker cut off from the network in the middle of an answer, while it holds the ticket's lease.

The product's defaults throughout (lease 60 s, sweep every 3 s, database keepalives 5 s idle,
2 s apart, 3 probes, TCP user timeout 10 s): PostgreSQL sees the silent session dead within about
ten seconds and drops its advisory lock, the sweeper rings, and a worker on another host takes
the ticket over long before the lease would have expired. When the link comes back, the cut-off
worker finishes writing its answer and finds the lease gone: the fence refuses its writes.
"""

from __future__ import annotations

import re

import pytest
import redis
from django.conf import settings

from tests.hosts.stack import Customer, Stack, an_order_of, wait_worker_ready
from tests.workers import wait_until

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(150)]

# The cut-off worker's answer streams slowly enough to outlast its take-over (about 20 s of
# tokens, longer while its Redis writes time out), so it is still answering when the link returns.
SLOW_TOKENS_MS = "700"


def agent_replies(stack: Stack, ticket_id: int) -> list[str]:
    rows = stack.sql(
        "SELECT body FROM tickets_message WHERE ticket_id = %s AND author_kind = 'agent' AND is_public ORDER BY id",
        ticket_id,
    )
    return [body for (body,) in rows]


def refunds_of(stack: Stack, order_number: str) -> list[dict]:
    """The provider's refunds of the demo order's payment."""
    return [r for r in stack.provider_refunds() if r["payment_intent"] == f"pi_demo_{order_number}"]


def run_state(stack: Stack, ticket_id: int) -> tuple[str, int, list[int]]:
    (status, failures, epochs), *_ = stack.sql(
        "SELECT status, failures, epochs FROM agents_agentrun WHERE ticket_id = %s", ticket_id
    )
    return status, failures, epochs


def test_a_worker_cut_off_mid_answer_is_taken_over_and_its_late_writes_are_refused(hosts: Stack):
    cut_off_host, other_host = hosts.worker_hosts[0], hosts.worker_hosts[1]
    cut_off = hosts.worker(cut_off_host, OFFLINE_MODEL_TOKEN_DELAY_MS=SLOW_TOKENS_MS)
    hosts.beat()
    wait_worker_ready(cut_off)
    an_order_of(hosts, "alice", "A-1903", 4999)
    alice = Customer(hosts.base_url(hosts.web_hosts[0]), "alice").login()
    ticket_id = alice.open_ticket("Please refund order A-1903", client_ref="partition-worker-1")
    buffers = redis.Redis.from_url(hosts.redis_url, socket_timeout=5)

    # The refund is paid and the answer is streaming: the worker holds the lease, mid-answer.
    wait_until(
        lambda: buffers.exists(f"{settings.CHANNELS_PREFIX}:stream:{ticket_id}"),
        timeout=60,
        what="the answer to start streaming",
    )
    assert [r["status"] for r in refunds_of(hosts, "A-1903")] == ["succeeded"]
    (stale_epoch, stale_owner, stale_expiry), *_ = hosts.sql(
        "SELECT epoch, owner, expires_at FROM agents_ticketlease WHERE ticket_id = %s", ticket_id
    )
    assert stale_owner

    hosts.net.cut(cut_off_host)
    other = hosts.worker(other_host)
    wait_worker_ready(other)
    # PostgreSQL drops the silent session (keepalives), the sweeper rings, the other worker answers.
    wait_until(lambda: run_state(hosts, ticket_id)[0] == "completed", timeout=60, what="the other worker's reply")
    (taken_over_at,), *_ = hosts.sql(
        "SELECT created_at FROM tickets_ticketevent WHERE ticket_id = %s AND kind = 'agent_run_recovered'", ticket_id
    )
    assert taken_over_at < stale_expiry  # not by the lease's expiry: the dead session was seen
    assert cut_off.alive()  # cut off, not dead: it is still writing its answer

    seen = len(cut_off.log())
    hosts.net.heal(cut_off_host)
    # The cut-off worker finishes its answer and tries to store it (its task then ends, whatever
    # came of it; the ledger below says what did).
    wait_until(
        lambda: re.search(r"advance_ticket\[[^]]+\] (succeeded|raised)", cut_off.log()[seen:]),
        timeout=90,
        what="the cut-off worker to finish its answer",
    )

    replies = agent_replies(hosts, ticket_id)
    assert len(replies) == 1 and "A-1903" in replies[0]
    status, failures, epochs = run_state(hosts, ticket_id)
    assert status == "completed" and failures == 0  # its failed attempt was not recorded either
    assert epochs[0] == stale_epoch and len(epochs) == 2
    steps = hosts.sql(
        "SELECT index, epoch FROM agents_modelstep WHERE ticket_id = %s AND status = 'completed' ORDER BY index",
        ticket_id,
    )
    assert [index for index, _ in steps] == list(range(len(steps)))  # each step stored once
    assert steps[-1][1] == epochs[1]  # the answer is the other worker's: none of the cut-off one's
    refunds = refunds_of(hosts, "A-1903")
    assert len(refunds) == 1 and refunds[0]["amount"] == 4999
    ours = hosts.sql("SELECT provider_refund_id, amount_cents FROM agents_refund WHERE ticket_id = %s", ticket_id)
    assert ours == [(refunds[0]["id"], 4999)]
    alice.close()
