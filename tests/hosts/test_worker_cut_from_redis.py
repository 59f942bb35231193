"""A worker cut off from Redis in the middle of an answer: the customer watching the chat still gets it.

Only the link between the worker's host and Redis is cut (PostgreSQL, the web servers and the
customer's socket are fine). The worker stores its answer in the ledger as usual, but its live
updates, the rest of the streamed words and the doorbell that says the answer is posted, never
reach Redis, so nothing tells the web server that holds the customer's socket. The page showed
the half-streamed answer for as long as it stayed open; the socket now reads the ledger itself
when it has heard nothing for a while and the customer is waiting on the agent. A member of staff
watching the ticket's page was not told either (and might answer the customer a second time); their
socket now asks the ticket's timeline number after a quiet spell.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.sync.client import connect

from tests.hosts.stack import REDIS_PORT, Customer, Stack, wait_worker_ready
from tests.workers import wait_until

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(180)]


class Chat:
    """The customer's chat socket on one web server, every frame it receives kept in order."""

    def __init__(self, customer: Customer, ticket_id: int) -> None:
        base = customer.base_url
        self.socket = connect(
            f"{base.replace('http://', 'ws://')}/ws/tickets/{ticket_id}/?after=0",
            origin=base,
            additional_headers={"Cookie": f"sessionid={customer.client.cookies['sessionid']}"},
        )
        self.frames: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        try:
            for raw in self.socket:
                self.frames.append(json.loads(raw))
        except Exception:  # noqa: BLE001, S110 - the socket closed: the frames so far are what it got
            pass

    def agent_messages(self) -> list[str]:
        return [f["text"] for f in list(self.frames) if f.get("kind") == "message" and f.get("author") == "agent"]

    def tokens(self) -> int:
        return sum(1 for f in list(self.frames) if f.get("type") == "token")

    def close(self) -> None:
        self.socket.close()
        self.reader.join(5)


def test_a_worker_cut_off_from_redis_mid_answer_still_shows_the_customer_its_answer(hosts: Stack):
    cut_off_host = hosts.worker_hosts[0]
    worker = hosts.worker(cut_off_host, OFFLINE_MODEL_TOKEN_DELAY_MS="300")
    wait_worker_ready(worker)
    alice = Customer(hosts.base_url(hosts.web_hosts[0]), "alice").login()
    ticket_id = alice.open_ticket("Where is my order A-1001?", client_ref="redis-cut-worker-1")
    chat = Chat(alice, ticket_id)

    wait_until(lambda: chat.tokens() >= 2, timeout=60, what="the answer to start streaming to the customer")
    hosts.net.block(cut_off_host, hosts.db, port=REDIS_PORT)

    def stored() -> list[str]:
        rows = hosts.sql(
            "SELECT body FROM tickets_message WHERE ticket_id = %s AND author_kind = 'agent' AND is_public",
            ticket_id,
        )
        return [body for (body,) in rows]

    wait_until(lambda: stored(), timeout=90, what="the cut-off worker to store its answer")
    wait_until(lambda: chat.agent_messages(), timeout=60, what="the customer's chat to show the stored answer")
    assert chat.agent_messages() == stored()
    chat.close()
    alice.close()


def test_a_worker_cut_off_from_redis_mid_answer_still_rings_the_staff_page_watching_the_ticket(hosts: Stack):
    cut_off_host = hosts.worker_hosts[1]
    worker = hosts.worker(cut_off_host, OFFLINE_MODEL_TOKEN_DELAY_MS="300")
    wait_worker_ready(worker)
    bob = Customer(hosts.base_url(hosts.web_hosts[1]), "bob").login()
    ticket_id = bob.open_ticket("Where is my order B-2001?", client_ref="redis-cut-worker-staff-1")
    chat = Chat(bob, ticket_id)
    staff = Customer(hosts.base_url(hosts.web_hosts[0]), "staff").login()
    page = connect(
        f"{staff.base_url.replace('http://', 'ws://')}/ws/staff/tickets/{ticket_id}/",
        origin=staff.base_url,
        additional_headers={"Cookie": f"sessionid={staff.client.cookies['sessionid']}"},
    )
    rings: list[str] = []
    reader = threading.Thread(target=lambda: rings.extend(raw for raw in _frames(page)), daemon=True)
    reader.start()

    wait_until(lambda: chat.tokens() >= 2, timeout=60, what="the answer to start streaming")
    hosts.net.block(cut_off_host, hosts.db, port=REDIS_PORT)

    def stored() -> bool:
        return bool(
            hosts.sql(
                "SELECT 1 FROM tickets_message WHERE ticket_id = %s AND author_kind = 'agent' AND is_public",
                ticket_id,
            )
        )

    wait_until(stored, timeout=90, what="the cut-off worker to store its answer")
    assert page.close_code is None  # the staff page's socket is open: it hears whatever is rung
    rung_before = len(rings)
    wait_until(lambda: len(rings) > rung_before, timeout=60, what="the staff page to be told the timeline moved")
    page.close()
    reader.join(5)
    chat.close()
    bob.close()
    staff.close()


def _frames(socket: Any) -> Iterator[str]:
    try:
        yield from socket
    except Exception:  # noqa: BLE001, S110 - the socket closed
        return
