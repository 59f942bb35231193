"""The offline model (the default model) refunds only what the customer clearly asks for, and asks
when it cannot tell.

With the customer's Confirm off (``REFUND_CUSTOMER_CONFIRMATION=0`` or the policy's
``customer_confirms_refunds``, as in most of the suite) what the model asks for under the threshold
is paid. So: a question about refunds is answered, not paid; "do not issue a refund", "rather a
replacement than a refund" and "hold off on the refund" are not requests; an amount it cannot read
("10%", "20 bucks") is asked for, one written with a decimal comma or the sign after it is read;
and a request taken back or changed in a later message is asked about again before anything is paid.
"""

from __future__ import annotations

import pytest

from agents.models import ToolCall
from agents.offline_model import OfflineDeterministicModel
from agents.runner import advance
from tests.agents.conftest import rung_again_and_again
from tests.agents.test_money_path import order_for, paid, write
from tests.agents.test_offline_model_reads_the_request import order_in
from tests.approvals.test_approvals import provider_refunds
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, HelpArticle, Message

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _last_answer(ticket) -> str:  # noqa: ANN001
    return Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).order_by("-id").first().body


@pytest.mark.parametrize(
    "question",
    [
        "Is order {n} eligible for a refund?",
        "What is your refund policy? My order is {n}.",
        "How long does a refund take for order {n}?",
        "I was wondering whether order {n} qualifies for a refund.",
    ],
)
def test_a_question_about_refunds_is_answered_not_paid(sandbox, question):  # noqa: ANN001
    HelpArticle.objects.create(
        slug="refund-policy", title="Refund policy", body="Refunds go back to the card used, in 5 to 10 business days."
    )
    customer = make_customer()
    order = order_for(customer, "B-8101", 8000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Question", body=question.format(n=order.number))

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)

    refunds = paid(sandbox, order)
    calls = list(ToolCall.objects.filter(ticket=ticket, name="issue_refund").values_list("arguments", flat=True))
    assert refunds == [] and calls == [], (
        f"the customer only asked a question about refunds, and the agent refunded the order: "
        f"provider refunds {[r['amount'] for r in refunds]} cents, calls {calls}"
    )
    assert "Refund policy" in _last_answer(ticket), "the question about refunds was not answered from the help center"


@pytest.mark.parametrize(
    "words",
    [
        "Please do not issue a refund for {n}, I just want to know where it is.",
        "Don't process a refund for {n}; I'd like a replacement instead.",
        "I'd rather have a replacement than a refund for {n}.",
        "Hold off on the refund for {n} until I check with my wife.",
    ],
)
def test_a_customer_who_says_no_refund_is_not_refunded(sandbox, words):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "B-8201", 8000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body=words.format(n=order.number))

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)

    refunds = [r["amount"] for r in paid(sandbox, order)]
    assert refunds == [], f"the customer said they want no refund, and was refunded {refunds} cents"


def test_a_request_that_never_came_still_asks(sandbox):  # noqa: ANN001
    """The other side: a negation about the parcel, not the refund, leaves the request standing."""
    customer = make_customer()
    order = order_for(customer, "B-8202", 8000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Late", body=f"Order {order.number} never came, please refund it."
    )
    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)
    assert [r["amount"] for r in paid(sandbox, order)] == [8000]


def test_a_refund_the_customer_took_back_before_the_agent_answered_is_not_paid(sandbox):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "B-8501", 8000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Late", body=f"Order {order.number} never came, please refund it."
    )
    write(ticket, "Sorry, never mind, the parcel just arrived. Please ignore my last message!")

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)

    refunds = [r["amount"] for r in paid(sandbox, order)]
    assert refunds == [], f"the customer took the request back before any answer, and was refunded {refunds} cents"
    assert "Just to be sure" in _last_answer(ticket)


@pytest.mark.parametrize("words", ["Refund order {n}?", "Refund my order {n}??", "It broke. Refund order {n}?"])
def test_a_refund_said_as_a_question_is_asked_about_not_waved_off(sandbox, words):  # noqa: ANN001
    """ "Refund order A-1001?" is said to us, but as a question: the agent asks to be sure (not an
    answer about refunds in general, not a payment), and the plain request then pays."""
    customer = make_customer()
    order = order_for(customer, "B-8701", 8000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=words.format(n=order.number))

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)

    assert paid(sandbox, order) == [], "a request put as a question was paid without asking"
    answer = _last_answer(ticket)
    assert "Just to be sure" in answer and order.number in answer, answer

    write(ticket, f"Please refund order {order.number}.")
    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)
    assert [r["amount"] for r in paid(sandbox, order)] == [8000]


def test_a_request_changed_to_another_order_is_asked_again_not_guessed(sandbox):  # noqa: ANN001
    customer = make_customer()
    wrong = order_for(customer, "A-8601", 3000, sandbox)
    meant = order_for(customer, "B-8602", 8000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Broken", body=f"Please refund order {wrong.number}, it arrived broken."
    )
    write(ticket, f"Sorry, wrong number: I meant {meant.number}. {wrong.number} is fine.")

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)

    refunds = [r["amount"] for r in paid(sandbox, wrong)]
    assert refunds == [], (
        f"the customer said {wrong.number} was the wrong number and is fine, and it was refunded {refunds} cents"
    )
    assert "Just to be sure" in _last_answer(ticket)

    write(ticket, f"Please refund order {meant.number}.")  # said plainly in one message: done
    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)
    assert [r["amount"] for r in paid(sandbox, meant)] == [8000] and paid(sandbox, wrong) == []


@pytest.mark.parametrize(
    ("currency", "body", "refunded_cents"),
    [
        ("eur", "Please refund 20 € of order E-8301, one item was missing", 2000),  # read
        ("usd", "Can you refund 10% of order E-8301? It arrived late.", 0),  # asked how much
        ("usd", "Please refund 20 bucks of order E-8301, one item was missing", 0),
        ("eur", "Please refund 1,50 EUR of order E-8301, it was overcharged", 150),
        ("eur", "Please refund EUR 1,50 of order E-8301", 150),
        ("eur", "Please refund €1,50 of order E-8301", 150),
        ("eur", "Please refund €12,50 of order E-8301", 1250),
        ("usd", "Please refund $1,5000 of order E-8301", 0),  # read two ways: asked
    ],
)
def test_an_amount_is_read_as_written_or_asked_for(sandbox, settings, currency, body, refunded_cents):  # noqa: ANN001
    settings.APPROVAL_POLICY_CURRENCY = currency  # a shop in this currency: its refunds are not all reviewed
    customer, order = order_in(sandbox, number="E-8301", total_cents=150000, currency=currency)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=body)

    advance(ticket.pk)

    refunded = sum(r["amount"] for r in provider_refunds(sandbox, order))
    assert refunded == refunded_cents, f"the customer wrote {body!r}; the provider refunded {refunded} minor units"
    if not refunded_cents:
        assert "How much of order E-8301" in _last_answer(ticket)


@pytest.mark.parametrize(
    ("written", "number"),
    [("1,200.00", "1200.00"), ("1.234,50", "1234.50"), ("1,50", "1.50"), ("1,200", "1200"), ("12.5", "12.5"),
     ("1,5000", None), ("12,34,56", None), ("1.2.3", None)],
)  # fmt: skip
def test_numbers_are_read_with_either_decimal_mark_or_not_at_all(written, number):  # noqa: ANN001
    from decimal import Decimal

    from agents.offline_model import _number

    assert _number(written) == (Decimal(number) if number else None)
