"""A person who takes a ticket over while the agent is answering, then hands it back.

- Handed back without a word from them: the customer's question is still unanswered, and the
  agent answers it (the run that was stopped answered nothing).
- Handed back after they answered: the answer the agent was writing before they took over is
  stale; it is not posted, and the agent does not answer what the person already answered.
- While the person has the ticket, none of the agent's words stream to the customer, nor after a
  hand-back of an answer begun before they took it.
- What counts is when the text was written: an answer the agent writes after the hand-back (with the
  person's reply in its conversation) is posted, and tells what the run did; an interim reply
  (``post_reply``) written before the person's reply is not posted after it.
"""

from __future__ import annotations

import json

import pytest
from channels.layers import get_channel_layer

from agents.llm import ModelResponse, ToolCallRequest
from agents.models import AgentRun, RunStatus
from agents.runner import advance
from agents.selectors import tickets_with_agent_work
from tests.agents.test_money_path import order_for, paid, public_words
from tests.conftest import make_customer
from tickets import realtime
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]

STALE = "Your order shipped yesterday (written before a person took over)."
FRESH = "Your order is on its way."


class Answers:
    """Answers every request with ``text``, after ``meanwhile`` ran (once) while it was writing;
    streams its answer word by word."""

    name = "answers"

    def __init__(self, text: str, meanwhile=None) -> None:  # noqa: ANN001
        self.text, self.meanwhile = text, meanwhile

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if self.meanwhile is not None:
            self.meanwhile()
            self.meanwhile = None
        if on_token is not None:
            for word in self.text.split(" "):
                on_token(word + " ")
        return ModelResponse(text=self.text)


def open_ticket() -> Ticket:
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Order", body="Where is my order?")
    return ticket


def test_a_ticket_handed_back_without_a_reply_is_answered_by_the_agent(person):  # noqa: ANN001
    ticket = open_ticket()

    def take_over() -> None:
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)

    advance(ticket.pk, model=Answers(STALE, meanwhile=take_over))
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
    assert STALE not in public_words(ticket)

    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
    assert ticket.pk in tickets_with_agent_work()
    outcome = advance(ticket.pk, model=Answers(FRESH))

    assert outcome.state == RunStatus.COMPLETED
    assert public_words(ticket) == [FRESH]
    unanswered = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True)
    assert not unanswered.exists()


def test_the_agents_answer_written_before_a_persons_reply_and_hand_back_is_not_posted(person):  # noqa: ANN001
    ticket = open_ticket()

    def person_answers_and_hands_back() -> None:
        ticket_services.staff_reply(ticket=ticket.pk, user=person, body="It arrives tomorrow.", client_msg_id="s1")
        ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)

    advance(ticket.pk, model=Answers(STALE, meanwhile=person_answers_and_hands_back))

    assert public_words(ticket) == ["It arrives tomorrow."]
    assert ticket.pk not in tickets_with_agent_work()  # the person answered it: nothing for the agent
    model = Answers(FRESH)
    advance(ticket.pk, model=model)
    assert public_words(ticket) == ["It arrives tomorrow."]

    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Thanks! And my refund?")
    advance(ticket.pk, model=model)
    assert public_words(ticket) == ["It arrives tomorrow.", FRESH]  # what comes next is the agent's again


def _tokens_published_while(ticket: Ticket, run) -> list[str]:  # noqa: ANN001
    """The pieces of the answer published to the ticket's watchers while ``run()`` runs."""
    layer = get_channel_layer()
    listener = realtime._client().pubsub()
    listener.subscribe(realtime._pubsub_channel(realtime.group_name(ticket.pk)))
    try:
        # Listening before the run starts (the server confirms it): a slow host cannot drop the first words.
        confirmed = listener.get_message(timeout=5)
        assert confirmed is not None and confirmed["type"] == "subscribe", confirmed
        run()
        pieces = []
        while (frame := listener.get_message(timeout=0.5)) is not None:
            if frame["type"] == "message":
                message = layer.deserialize(frame["data"])
                if message["type"] == "ticket.token":
                    pieces.append(message["text"])
        return pieces
    finally:
        listener.close()


@pytest.mark.parametrize("taken_over", [False, True])
def test_no_word_streams_to_the_customer_while_a_person_has_the_ticket(person, taken_over):  # noqa: ANN001
    ticket = open_ticket()

    def take_over() -> None:
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)

    model = Answers(STALE, meanwhile=take_over if taken_over else None)
    pieces = _tokens_published_while(ticket, lambda: advance(ticket.pk, model=model))

    if not taken_over:  # the same answer streams when the agent has the ticket
        assert "".join(pieces).strip() == STALE
        return
    assert pieces == []
    assert realtime.streamed_so_far(ticket.pk) == (None, "")
    assert STALE not in public_words(ticket)

    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)  # the agent's again: it streams
    again = _tokens_published_while(ticket, lambda: advance(ticket.pk, model=Answers(FRESH)))
    assert "".join(again).strip() == FRESH


def test_an_answer_written_after_the_hand_back_is_posted_and_the_refund_it_made_is_told(sandbox, person):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "V-8001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund V-8001")
    told = "I have refunded $50.00 to your card."

    class RepliedAndHandedBackMidStep:
        name = "refund-after-hand-back"

        def __init__(self) -> None:
            self.first = True

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            if self.first:
                self.first = False
                # While the model writes the step: a person answers and hands the ticket back.
                ticket_services.staff_reply(ticket=ticket.pk, user=person, body="Looking into it.", client_msg_id="p1")
                ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
                return ModelResponse(
                    text="",
                    tool_calls=[
                        ToolCallRequest("r1", "issue_refund", '{"order_number": "V-8001", "amount_cents": 5000}')
                    ],
                )
            return ModelResponse(text=told)  # written after the hand-back, with the refund's result

    advance(ticket.pk, model=RepliedAndHandedBackMidStep())

    assert [r["amount"] for r in paid(sandbox, order)] == [5000]  # the agent had the ticket back: it paid
    assert Ticket.objects.get(pk=ticket.pk).status not in {TicketStatus.WITH_HUMAN}
    # ...and then it must say so: nobody else will (the ticket is the agent's, the person's reply predates it).
    assert told in public_words(ticket), public_words(ticket)
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED


def test_no_word_of_a_stale_answer_streams_after_a_reply_and_hand_back(person):  # noqa: ANN001
    ticket = open_ticket()

    def person_answers_and_hands_back() -> None:
        ticket_services.staff_reply(ticket=ticket.pk, user=person, body="It arrives tomorrow.", client_msg_id="s1")
        ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)

    model = Answers(STALE, meanwhile=person_answers_and_hands_back)
    pieces = _tokens_published_while(ticket, lambda: advance(ticket.pk, model=model))

    assert STALE not in public_words(ticket)  # not posted: it was written before the person's reply
    assert "".join(pieces).strip() == ""  # ...so none of it may be shown either


def test_an_interim_reply_written_before_a_persons_reply_is_not_posted_after_the_hand_back(person):  # noqa: ANN001
    """The model's step asks to post an interim reply (the post_reply tool); while it is written a
    person answers and hands the ticket back. The text was written before the person's answer, like
    a final answer in flight, so it is stale: it must not be posted after the person's reply."""
    ticket = open_ticket()

    class InterimThenDone:
        name = "interim-then-done"

        def __init__(self) -> None:
            self.first = True

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            if self.first:
                self.first = False
                ticket_services.staff_reply(
                    ticket=ticket.pk, user=person, body="It arrives tomorrow.", client_msg_id="s1"
                )
                ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
                return ModelResponse(
                    text="", tool_calls=[ToolCallRequest("p1", "post_reply", json.dumps({"text": STALE}))]
                )
            return ModelResponse(text="Anything else?")

    advance(ticket.pk, model=InterimThenDone())

    words = public_words(ticket)
    assert words[0] == "It arrives tomorrow."
    assert STALE not in words, words  # written before the person's reply, posted after it


class Spends:
    """Asks for a help search (``searches`` times per run), then answers; every step reports
    ``tokens`` prompt tokens."""

    name = "spends"

    def __init__(self, tokens: int, searches: int) -> None:
        self.tokens, self.searches = tokens, searches

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        from agents.llm import Usage

        since_user = 0
        for message in reversed(messages):
            if message["role"] == "user":
                break
            since_user += message["role"] == "tool"
        if since_user < self.searches:
            call = ToolCallRequest(id=f"s{since_user}", name="search_help", arguments='{"query": "shipping"}')
            return ModelResponse(text="", tool_calls=[call], usage=Usage(self.tokens, 0))
        return ModelResponse(text=FRESH, usage=Usage(self.tokens, 0))


def test_a_ticket_handed_back_after_its_token_budget_gets_a_new_budget(person, settings):  # noqa: ANN001
    """The budget is the agent's for each stretch it has the ticket: a person who takes a ticket
    handed off at its budget and gives it back gets the agent's answer, not a hand-off at once (the
    tokens spent before were already judged by that person). The new stretch has its own limit."""
    settings.AGENT_TOKEN_BUDGET = 250
    ticket = open_ticket()

    outcome = advance(ticket.pk, model=Spends(100, searches=5))
    assert outcome.state == RunStatus.HANDED_OFF
    assert "token budget" in Message.objects.get(ticket=ticket, is_public=False).body

    ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
    outcome = advance(ticket.pk, model=Spends(100, searches=1))  # one step of 100: inside a fresh budget

    assert outcome.state == RunStatus.COMPLETED
    assert public_words(ticket)[-1] == FRESH

    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="And the other one?")
    outcome = advance(ticket.pk, model=Spends(100, searches=2))  # the third step would pass 250 since the hand-back
    assert outcome.state == RunStatus.HANDED_OFF
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
