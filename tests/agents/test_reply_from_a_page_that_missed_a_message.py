"""No message lost: a person's reply answers only what their page showed, also when a run had taken it in.

A member of staff replies from a page read before the customer's latest message (``seen_seq``):
their reply does not answer it. The staff page says so ("their new message waits"), and the agent
answers it after the hand-back (``tickets.services.staff_reply``). That held only for a message no
run had taken in yet. One the agent had just taken into a run was made unanswered again when the
reply stopped that run only if no person had written after it, by the clock: the reply that never
showed it counted as its answer, so after the hand-back nobody answered it at all.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, RunStatus
from agents.runner import advance
from agents.selectors import tickets_with_agent_work
from tests.agents.test_hand_back import Answers, open_ticket
from tests.agents.test_money_path import public_words
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

FIRST = "Your order shipped yesterday."
STALE = "About your refund (written before a person took over)."
FRESH = "Your refund is on its way."
PERSON = "Glad to help with the order."


def _a_reply_while_the_agent_writes(ticket: Ticket, person, *, page_shows_the_message: bool) -> None:  # noqa: ANN001
    """The agent answered the first message; the customer writes again; while the agent writes its
    answer to that, a person replies from the ticket's page (read before or after that message) and
    hands the ticket back."""
    advance(ticket.pk, model=Answers(FIRST))
    page_before = Ticket.objects.get(pk=ticket.pk).last_event_seq
    ticket_services.message_post(ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="And my refund?")
    page = Ticket.objects.get(pk=ticket.pk).last_event_seq if page_shows_the_message else page_before

    def person_replies_and_hands_back() -> None:
        ticket_services.staff_reply(ticket=ticket.pk, user=person, body=PERSON, client_msg_id="s1", seen_seq=page)
        ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)

    advance(ticket.pk, model=Answers(STALE, meanwhile=person_replies_and_hands_back))
    assert AgentRun.objects.filter(ticket=ticket).order_by("-pk")[0].status == RunStatus.HANDED_OFF
    assert public_words(ticket) == [FIRST, PERSON]


def test_a_message_the_persons_page_never_showed_is_answered_by_the_agent_after_the_hand_back(person):  # noqa: ANN001
    ticket = open_ticket()
    _a_reply_while_the_agent_writes(ticket, person, page_shows_the_message=False)

    assert ticket.pk in tickets_with_agent_work(), "the message the person never saw is answered by nobody"
    outcome = advance(ticket.pk, model=Answers(FRESH))
    assert outcome.state == RunStatus.COMPLETED
    assert public_words(ticket) == [FIRST, PERSON, FRESH]
    unanswered = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True)
    assert not unanswered.exists()


def test_a_message_the_persons_page_showed_is_answered_by_their_reply(person):  # noqa: ANN001
    ticket = open_ticket()
    _a_reply_while_the_agent_writes(ticket, person, page_shows_the_message=True)

    assert ticket.pk not in tickets_with_agent_work()
    advance(ticket.pk, model=Answers(FRESH))
    assert public_words(ticket) == [FIRST, PERSON]
