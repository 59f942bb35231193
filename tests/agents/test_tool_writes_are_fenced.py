"""The agent's own tools that write to the ledger (``hand_off_to_human``, ``post_reply``,
``add_internal_note``) write only while their worker still holds the ticket's lease (DESIGN.md,
invariant 3), as the refund tool does.

A worker paused between the call's intent and its effect (SIGSTOP, a frozen VM) past its lease's
expiry is taken over: the new owner finishes the call under its key, and a person may have
handled the ticket and given it back by the time the paused worker wakes. Its late effect is
refused by the fence: it does not hand the ticket to a person again behind their back (a
customer who writes next would wait for a person nobody assigned), nor post words of a run that
has ended.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection

from agents import faults
from agents.llm import ModelResponse, ToolCallRequest
from agents.models import AgentRun, CallStatus, RunStatus, ToolCall
from agents.runner import advance
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketEvent, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


class AsksFor:
    """Asks for one tool call, then answers in words once it has the call's result."""

    name = "asks-for"

    def __init__(self, tool: str, arguments: dict) -> None:
        self.tool, self.arguments = tool, arguments

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if any(m.get("role") == "tool" for m in messages):
            return ModelResponse(text="Done.")
        return ModelResponse(text="", tool_calls=[ToolCallRequest("c1", self.tool, json.dumps(self.arguments))])


def paused_past_its_lease_while(ticket_id: int, monkeypatch, meanwhile) -> None:  # noqa: ANN001
    """Once the first worker's call intent is committed (and before its effect runs), it stops past
    its lease; ``meanwhile`` runs then (in another thread: another worker, with its own connection)."""
    hit = faults.hit
    done = []

    def pause(point: str) -> None:
        if point == "after_call_started" and not done:
            done.append(True)
            with connection.cursor() as cursor:  # the lease runs out while the worker is stopped
                cursor.execute(
                    "UPDATE agents_ticketlease SET expires_at = now() - interval '1 second' WHERE ticket_id = %s",
                    [ticket_id],
                )
            failed: list[BaseException] = []

            def other() -> None:
                try:
                    meanwhile()
                except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
                    failed.append(exc)
                finally:
                    connection.close()

            thread = threading.Thread(target=other)
            thread.start()
            thread.join(timeout=60)
            assert not thread.is_alive() and not failed, failed
        hit(point)

    monkeypatch.setattr(faults, "hit", pause)


def test_a_worker_that_lost_the_lease_does_not_hand_the_ticket_off_again_after_a_hand_back(monkeypatch, person):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Help", body="I want to talk to a person.")
    model = AsksFor("hand_off_to_human", {"reason": "the customer asked for a person"})

    def another_worker_then_the_person() -> None:
        # The sweeper rings; another worker takes the expired lease over and finishes the hand-off.
        advance(ticket.pk, model=model)
        assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
        # The person talks to the customer, then gives the ticket back to the agent.
        ticket_services.staff_reply(ticket=ticket.pk, user=person, body="Hi, I sorted it out.", client_msg_id="p1")
        ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)

    paused_past_its_lease_while(ticket.pk, monkeypatch, another_worker_then_the_person)
    stale = advance(ticket.pk, model=model)  # the first worker wakes and carries on

    assert stale.state == "lease_lost"
    handed_back = TicketEvent.objects.filter(ticket=ticket, kind="status_changed", payload__to=TicketStatus.OPEN)
    after = TicketEvent.objects.filter(ticket=ticket, seq__gt=handed_back.latest("seq").seq, kind="status_changed")
    assert list(after.values_list("payload__to", "actor_ref")) == []
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN  # the agent's, as the person left it
    call = ToolCall.objects.get(ticket=ticket, name="hand_off_to_human")
    assert call.status == CallStatus.SUCCEEDED and call.attempts >= 1
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF

    # The customer writes again: the agent, which has the ticket, answers.
    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="Thanks! One more thing."
    )
    advance(ticket.pk, model=AsksFor("lookup_order", {"order_number": "A-1"}))
    last = Message.objects.filter(ticket=ticket, is_public=True).order_by("-created_at", "-id").first()
    assert last.author_kind == AuthorKind.AGENT


def test_a_worker_that_lost_the_lease_posts_no_interim_reply_of_a_run_that_ended(monkeypatch, person):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Help", body="Where is my parcel?")
    model = AsksFor("post_reply", {"text": "Let me check on that parcel for you."})

    def another_worker_then_the_person() -> None:
        # A person takes the ticket; the worker rung for it ends the run (nothing is posted: a
        # person has it, and the interrupted post is recorded as may-have-happened), then they give
        # the ticket back without a word.
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
        advance(ticket.pk, model=model)
        assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
        ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)

    paused_past_its_lease_while(ticket.pk, monkeypatch, another_worker_then_the_person)
    stale = advance(ticket.pk, model=model)

    assert stale.state == "lease_lost"
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, body__startswith="Let me").exists()


def test_a_worker_that_lost_the_lease_sends_no_email_the_one_that_took_over_recorded_as_uncertain(
    monkeypatch, mailoutbox
):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Help", body="Email me the details, please.")
    model = AsksFor("notify_customer_by_email", {"subject": "Your request", "body": "Here are the details."})

    def another_worker() -> None:
        # An email cannot be deduplicated: the worker that takes over records it as may-have-happened
        # and does not send it again; the model is told to check before repeating it.
        advance(ticket.pk, model=model)
        call = ToolCall.objects.get(ticket=ticket, name="notify_customer_by_email")
        assert call.status == CallStatus.UNCERTAIN

    paused_past_its_lease_while(ticket.pk, monkeypatch, another_worker)
    stale = advance(ticket.pk, model=model)

    assert stale.state == "lease_lost"
    assert mailoutbox == []  # nobody sent it: not the new owner (uncertain), not the stopped worker
