"""A worker cut off from PostgreSQL while its refund request is still at the payment provider.

The provider holds the request (its idempotency key claimed, the refund not made yet) while the
worker's host loses its link to the database host (the provider stays reachable). PostgreSQL sees
the silent session dead, the sweeper rings, and a worker on another host takes the ticket over:
recovery asks the provider under the call's key, finds the claim still in progress (409) or the
refund made, and settles under that same key. When the link returns, the cut-off worker holds its
answer from the provider and finds the lease gone: nothing of it is written. One payment, and the
customer answered once.
"""

from __future__ import annotations

import re

import httpx
import pytest

from payments.sandbox_process import SandboxControl
from tests.hosts.stack import Customer, Stack, an_order_of, wait_worker_ready
from tests.hosts.test_worker_partition import agent_replies, refunds_of, run_state
from tests.workers import wait_until

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(240)]

HELD_MS = 15000  # longer than the take-over (about ten seconds), shorter than the new owner's tries


def keys_in_flight(stack: Stack) -> list[str]:
    answer = httpx.get(f"{stack.sandbox_url}/_sandbox/idempotency_keys", timeout=10, trust_env=False)
    answer.raise_for_status()
    return [k["key"] for k in answer.json()["data"] if k["state"] == "in_flight"]


def test_a_refund_still_at_the_provider_when_its_worker_is_cut_off_is_paid_once(hosts: Stack):
    cut_off_host, other_host = hosts.worker_hosts[0], hosts.worker_hosts[1]
    cut_off = hosts.worker(cut_off_host)
    hosts.beat()
    wait_worker_ready(cut_off)
    an_order_of(hosts, "alice", "A-1901", 2900)
    SandboxControl(hosts.sandbox_url).fault(f"latency:{HELD_MS}")  # the next refund request is held
    before = len(refunds_of(hosts, "A-1901"))
    alice = Customer(hosts.base_url(hosts.web_hosts[1]), "alice").login()
    ticket_id = alice.open_ticket("Please refund order A-1901", client_ref="refund-in-flight-1")

    wait_until(lambda: keys_in_flight(hosts), timeout=60, what="the refund request to be held at the provider")
    hosts.net.block(cut_off_host, hosts.db)  # PostgreSQL and Redis; the provider is still reachable
    other = hosts.worker(other_host)
    wait_worker_ready(other)

    wait_until(
        lambda: run_state(hosts, ticket_id)[0] in {"completed", "handed_off"},
        timeout=120,
        what="the other worker to settle the refund and end the run",
    )
    seen = len(cut_off.log())
    hosts.net.unblock(cut_off_host, hosts.db)
    wait_until(
        lambda: re.search(r"advance_ticket\[[^]]+\] (succeeded|raised)", cut_off.log()[seen:]),
        timeout=90,
        what="the cut-off worker to finish its pass",
    )

    refunds = refunds_of(hosts, "A-1901")
    assert len(refunds) == before + 1, refunds  # one payment
    ours = hosts.sql("SELECT provider_refund_id FROM agents_refund WHERE ticket_id = %s", ticket_id)
    assert [r for (r,) in ours if r is not None] in ([], [refunds[-1]["id"]])
    assert len(agent_replies(hosts, ticket_id)) <= 1  # answered once (or handed to a person, told once)
    status, _, epochs = run_state(hosts, ticket_id)
    assert len(epochs) == 2, epochs  # taken over once; the cut-off worker's late writes were refused
    alice.close()
