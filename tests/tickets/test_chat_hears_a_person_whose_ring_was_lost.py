"""A person's reply, or an approval's decision, whose ring was lost still reaches the customer's open chat.

The ring that tells the web server holding the customer's socket to read the timeline goes through
Redis, best effort: a web server or worker cut off from it for a moment (or whose PUBLISH went to a
connection Redis had just dropped, or that skips live updates for a few seconds after such a failure)
stores the reply with no word to the socket. While the customer waits on the agent, a quiet socket
reads the ledger itself; while they wait on a person (the ticket is with one, or a request of theirs
waits for staff's approval) it did not, and the reply stayed off the page for as long as it was open.
"""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async

from tests.tickets.test_consumer import run, session_cookie, socket, until_ready
from tickets import services
from tickets.models import ActorKind, AuthorKind, Customer, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def person(django_user_model):  # noqa: ANN001, ANN201
    return django_user_model.objects.create_user(username="sam", password="pw-for-tests-123", is_staff=True)


def heard_while_rings_are_lost(customer: Customer, ticket_id: int, write: Any, monkeypatch) -> list[dict[str, Any]]:  # noqa: ANN001
    """The frames the customer's open chat gets within 10 s of quiet after ``write``, every ring meanwhile lost."""
    monkeypatch.setattr("support.websocket.QUIET_CHECK_SECONDS", 0.5, raising=False)
    heard: list[dict[str, Any]] = []
    headers = session_cookie(customer)

    async def scenario() -> None:
        ws = socket(ticket_id, after=0, headers=headers)
        await ws.connect()
        await until_ready(ws)
        lost: list[dict[str, Any]] = []
        monkeypatch.setattr("tickets.realtime.publish", lambda group, message: lost.append(message))
        await database_sync_to_async(write)()
        assert lost, "the write rang no doorbell to lose"
        while not await ws.receive_nothing(timeout=10):
            heard.append(await ws.receive_json_from())
            if heard[-1].get("kind") == "message":
                break
        await ws.disconnect()

    run(scenario)
    return heard


def test_a_persons_reply_whose_ring_was_lost_reaches_the_open_chat(customer, person, monkeypatch):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    services.ticket_take_over(ticket=ticket, user=person)

    heard = heard_while_rings_are_lost(
        customer,
        ticket.pk,
        lambda: services.staff_reply(ticket=ticket.pk, user=person, body="It left today.", client_msg_id="r-1"),
        monkeypatch,
    )

    assert [f.get("text") for f in heard if f.get("kind") == "message"] == ["It left today."], (
        f"a person's reply whose ring was lost never reached the customer's open chat: it heard {heard}"
    )


def test_an_answer_after_an_approval_whose_ring_was_lost_reaches_the_open_chat(customer, monkeypatch):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Refund", body="Refund my kettle, please.")
    # The agent's turn took the message in, asked for an approval and paused: it is typing no more.
    ticket.messages.update(agent_handled_at=ticket.created_at)
    for kind in ("agent_run_started", "agent_run_waiting_approval"):
        services.event_append(
            ticket=ticket, kind=kind, actor_kind=ActorKind.AGENT, payload={"run_id": 1}, is_public=True
        )
    services.ticket_transition(ticket=ticket, to_status=TicketStatus.PENDING_APPROVAL, actor_kind=ActorKind.AGENT)

    def answer() -> None:
        services.message_post(ticket=ticket.pk, author_kind=AuthorKind.AGENT, body="Your refund is on its way.")

    heard = heard_while_rings_are_lost(customer, ticket.pk, answer, monkeypatch)

    assert [f.get("text") for f in heard if f.get("kind") == "message"] == ["Your refund is on its way."], (
        f"the answer after an approval, its ring lost, never reached the customer's open chat: it heard {heard}"
    )


def test_a_persons_unprompted_reply_whose_ring_was_lost_reaches_the_open_chat(customer, person, monkeypatch):  # noqa: ANN001
    """The customer waits on nobody (the agent answered, its turn over): a person who then writes takes the
    ticket in the same stroke, and that one ring, lost, was all that would have told the socket."""
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    ticket.messages.update(agent_handled_at=ticket.created_at)
    services.event_append(
        ticket=ticket, kind="agent_run_started", actor_kind=ActorKind.AGENT, payload={"run_id": 1}, is_public=True
    )
    services.message_post(ticket=ticket.pk, author_kind=AuthorKind.AGENT, body="It ships on Monday.")
    services.event_append(
        ticket=ticket, kind="agent_run_completed", actor_kind=ActorKind.AGENT, payload={"run_id": 1}, is_public=True
    )

    heard = heard_while_rings_are_lost(
        customer,
        ticket.pk,
        lambda: services.staff_reply(ticket=ticket.pk, user=person, body="It left today.", client_msg_id="r-2"),
        monkeypatch,
    )

    assert [f.get("text") for f in heard if f.get("kind") == "message"][-1:] == ["It left today."], (
        f"a person's reply whose ring was lost never reached the customer's open chat: it heard {heard}"
    )
