"""Nothing the agent wrote before a person's reply reaches the customer after that reply.

DESIGN.md invariant 12, and the README's staff inbox: an answer the agent was writing when a person
replied is never posted, even after a hand-back. The same holds for what a step asks to say through
a tool (``post_reply``, ``notify_customer_by_email``), and "before" is judged by the ticket's
timeline numbers, not by clocks: each step keeps the number its conversation was read at
(``ModelStep.read_seq``). A person who takes, resolves or closes the ticket while ``post_reply``
runs stops its message: the ticket's status is read under its row lock next to the insert.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import connection

from agents.conversation import request_of
from agents.llm import ModelError, ModelResponse, ToolCallRequest, Usage
from agents.models import ModelStep
from agents.runner import advance
from tests.agents.conftest import retry_time_comes, while_tool_runs
from tests.agents.test_money_path import public_words
from tests.agents.test_reply_after_hand_back_mid_pass import answers_and_hands_back
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

PERSON = "PERSON: your parcel was lost, a new one ships today."
INTERIM = "INTERIM: your order is on its way, arriving in two days."
AGENT = "AGENT: anything else?"


def asks(name: str, args: dict[str, Any], call_id: str) -> ModelResponse:
    return ModelResponse(
        text="", tool_calls=[ToolCallRequest(call_id, name, json.dumps(args))], usage=Usage(10, 5),
        finish_reason="tool_calls",
    )  # fmt: skip


class Scripted:
    """Answers in order; ``requests`` keeps what each call was sent."""

    name = "scripted"

    def __init__(self, *responses: ModelResponse) -> None:
        self.responses, self.requests = list(responses), []

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        self.requests.append(list(messages))
        return self.responses[min(len(self.requests), len(self.responses)) - 1]


def seq_of(message: Message) -> int:
    return TicketEvent.objects.get(ticket_id=message.ticket_id, kind="message", payload__message_id=message.pk).seq


def assert_no_agent_words_written_blind(ticket: Ticket) -> None:
    """Every public message of the agent posted after a person's reply was written with that reply in
    its request (rebuilt from the ledger)."""
    replies = [(seq_of(m), m.body) for m in Message.objects.filter(ticket=ticket, author_kind="staff", is_public=True)]
    for message in Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True):
        key = message.client_msg_id
        if key.startswith("reply:"):
            _, run_id, index, *_ = key.split(":")
            step = ModelStep.objects.filter(run_id=run_id, index=index, status="completed").latest("attempt")
        else:  # tool:<idempotency key>
            step = ModelStep.objects.get(calls__idempotency_key=key.removeprefix("tool:"))
        request = " ".join(str(m.get("content") or "") for m in request_of(step))
        for seq, body in replies:
            if seq < seq_of(message):
                assert body in request, f"{message.body!r} was posted after {body!r} but written without it"


@pytest.fixture
def answered_while_lookup_runs(person, monkeypatch):  # noqa: ANN001, ANN201
    """A ticket on which a person replies and hands back while the agent's lookup runs: after the
    pass's last commit, so no commit of its own has shown it the reply yet."""
    customer = make_customer()
    order = make_order(customer)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body=f"Where is {order.number}?")

    while_tool_runs(monkeypatch, "lookup_order", answers_and_hands_back(person, ticket.pk, PERSON))
    return ticket, order


def test_a_post_reply_written_before_the_persons_reply_is_not_posted(answered_while_lookup_runs):  # noqa: ANN001
    ticket, order = answered_while_lookup_runs
    model = Scripted(
        asks("lookup_order", {"order_number": order.number}, "l1"), asks("post_reply", {"text": INTERIM}, "p1"),
        ModelResponse(text=AGENT),
    )  # fmt: skip

    advance(ticket.pk, model=model)

    assert INTERIM not in public_words(ticket), public_words(ticket)
    assert_no_agent_words_written_blind(ticket)
    # The refused post told the model why; the pass read the ledger again, and the answer it then
    # wrote had the person's reply in view.
    assert PERSON in " ".join(str(m.get("content") or "") for m in model.requests[-1])
    assert public_words(ticket) == [PERSON, AGENT], public_words(ticket)


def test_an_email_written_before_the_persons_reply_is_not_sent(answered_while_lookup_runs, mailoutbox):  # noqa: ANN001
    ticket, order = answered_while_lookup_runs
    model = Scripted(
        asks("lookup_order", {"order_number": order.number}, "l1"),
        asks("notify_customer_by_email", {"subject": "Your order", "body": INTERIM}, "e1"), ModelResponse(text=AGENT),
    )  # fmt: skip

    advance(ticket.pk, model=model)

    assert [m.body for m in mailoutbox] == [], "an email written without the person's reply was sent after it"
    assert_no_agent_words_written_blind(ticket)


def test_a_reply_still_being_committed_when_the_pass_read_is_seen_by_its_number(person, monkeypatch):  # noqa: ANN001
    """The person's reply row is stamped (created_at) before the pass reads the conversation, and
    committed after: a check by clock ("created after the read") never sees it; by the timeline's
    numbers, it is after the number the pass read."""
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Can I get a refund?")
    row_written, may_commit = threading.Event(), threading.Event()

    class FailsOnceThenAnswers:
        name = "fails-once-then-answers"

        def __init__(self) -> None:
            self.calls = 0

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            self.calls += 1
            if self.calls == 1:
                raise ModelError("overloaded", retryable=True)
            may_commit.set()  # the pass has read; the person's transaction commits now
            staff.join(10)
            ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
            return ModelResponse(text=AGENT)

    model = FailsOnceThenAnswers()
    assert advance(ticket.pk, model=model).state == "retry"
    retry_time_comes(ticket.pk)  # the next pass reads without writing the ticket first
    real_message_event = ticket_services._message_event

    def message_event(message, *args, **kwargs):  # noqa: ANN001, ANN202
        if message.author_kind == AuthorKind.STAFF and threading.current_thread() is staff:
            row_written.set()
            may_commit.wait(5)  # the row is written, its transaction not committed
        return real_message_event(message, *args, **kwargs)

    monkeypatch.setattr(ticket_services, "_message_event", message_event)

    def staff_replies() -> None:
        try:
            ticket_services.staff_reply(ticket=ticket.pk, user=person, body=PERSON, client_msg_id="p1")
        finally:
            connection.close()

    staff = threading.Thread(target=staff_replies)
    staff.start()
    assert row_written.wait(5)
    advance(ticket.pk, model=model)
    staff.join(10)

    assert AGENT not in public_words(ticket), public_words(ticket)
    assert_no_agent_words_written_blind(ticket)


@pytest.mark.parametrize("how", ["close", "take_over", "resolve"])
def test_a_post_reply_under_way_when_a_person_takes_the_ticket_is_not_posted(person, monkeypatch, how):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is my order?")
    act = {
        "close": ticket_services.ticket_close, "take_over": ticket_services.ticket_take_over,
        "resolve": ticket_services.ticket_resolve,
    }[how]  # fmt: skip
    # After the call's own check, before its message: the person's action commits in between.
    while_tool_runs(monkeypatch, "post_reply", lambda: act(ticket=ticket.pk, user=person))

    advance(ticket.pk, model=Scripted(asks("post_reply", {"text": INTERIM}, "k1"), ModelResponse(text=AGENT)))

    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True).exists(), (
        f"the agent posted after a person's {how}: {public_words(ticket)}"
    )
