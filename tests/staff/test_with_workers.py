"""A person takes a ticket from the agent in the middle of its answer, with a real worker:
the agent posts nothing while the person has it, and after the hand-back it answers what came
next, with the person's reply in its conversation."""

from __future__ import annotations

import pytest

from agents.conversation import request_of
from agents.models import AgentRun, ModelStep, RunStatus
from tests.conftest import make_customer, make_order
from tests.staff.conftest import make_support_staff
from tests.workers import wait_until
from tickets import realtime, services
from tickets.models import AuthorKind, Message, TicketEvent, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]


def _agent_messages(ticket_id: int) -> list[Message]:
    return list(Message.objects.filter(ticket_id=ticket_id, author_kind=AuthorKind.AGENT).order_by("id"))


def _seq_of_message(message: Message) -> int:
    return TicketEvent.objects.get(ticket_id=message.ticket_id, kind="message", payload__message_id=message.pk).seq


def test_taken_over_mid_answer_the_agent_posts_nothing_until_handed_back(cluster):  # noqa: ANN001
    customer = make_customer()
    make_order(customer, number="K-4242")
    person = make_support_staff("maria", first_name="Maria", last_name="Lopez")
    ticket, _ = services.ticket_open(customer=customer, subject="Order", body="Where is my order K-4242?")
    cluster.worker(OFFLINE_MODEL_TOKEN_DELAY_MS="120")

    # The agent is in the middle of writing its answer.
    wait_until(lambda: bool(realtime.streamed_so_far(ticket.pk)[1]), timeout=60, what="the answer to stream",
               cluster=cluster)  # fmt: skip
    services.ticket_take_over(ticket=ticket, user=person)
    reply = "Maria here: it left our warehouse today."
    services.staff_reply(ticket=ticket, user=person, body=reply, client_msg_id="r1")
    wait_until(
        lambda: not AgentRun.objects.filter(ticket=ticket, status=RunStatus.RUNNING).exists(),
        timeout=60, what="the run in flight to end", cluster=cluster,
    )  # fmt: skip
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.HANDED_OFF
    assert _agent_messages(ticket.pk) == []

    # The customer answers the person; the agent is rung but stays out.
    services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user,
                          body="Thanks! And what is your returns address?")  # fmt: skip
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN

    services.ticket_hand_back(ticket=ticket, user=person)
    wait_until(lambda: bool(_agent_messages(ticket.pk)), timeout=60, what="the agent to answer", cluster=cluster)
    wait_until(
        lambda: not AgentRun.objects.filter(ticket=ticket, status=RunStatus.RUNNING).exists(),
        timeout=60, what="the new run to end", cluster=cluster,
    )  # fmt: skip

    hand_back = TicketEvent.objects.get(ticket=ticket, kind="status_changed", payload__from=TicketStatus.WITH_HUMAN)
    replies = _agent_messages(ticket.pk)
    assert len(replies) == 1
    assert _seq_of_message(replies[0]) > hand_back.seq  # nothing from the agent while the person had it
    # The new turn took only the message that came after the person's reply, and saw that reply.
    new_run = AgentRun.objects.filter(ticket=ticket).exclude(pk=run.pk).get()
    answered = Message.objects.get(pk__in=new_run.input_message_ids)
    assert answered.body.startswith("Thanks!")
    last_step = ModelStep.objects.filter(run=new_run).order_by("-index").first()
    request_text = " ".join(str(m.get("content", "")) for m in request_of(last_step))
    assert reply in request_text
