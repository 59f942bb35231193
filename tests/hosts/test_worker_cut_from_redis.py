"""A worker cut off from Redis in the middle of an answer: the customer watching the chat still gets it.

Only the link between the worker's host and Redis is cut (PostgreSQL, the web servers and the
customer's socket are fine). The worker stores its answer in the ledger as usual, but its live
updates, the rest of the streamed words and the doorbell that says the answer is posted, never
reach Redis, so nothing tells the web server that holds the customer's socket. The page showed
the half-streamed answer for as long as it stayed open; the socket now reads the ledger itself
when it has heard nothing for a while and the customer is waiting on the agent.
"""

from __future__ import annotations

import json
import threading
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
