"""The offline model acts on plainly worded requests, and on nothing else.

"I'm thinking about a refund", "I might want a refund, I'll let you know", "my sister got a refund"
and "I received the refund, thank you" ask for nothing: no money moves (it asks, or answers). One
item of a two-item order ("the broken mug from order ...", "the kettle on order ...", "most of ...")
is asked about, never refunded as the whole order. And a plain request with a date or a count in it
("it came damaged on the 3rd", "it arrived 2 days late"), a negation that is not about the refund
("as it was not what I ordered"), or a courtesy ("when you get a chance") is acted on.
"""

from __future__ import annotations

import pytest

from agents.offline_model import OfflineDeterministicModel
from tests.agents.conftest import rung_again_and_again
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _answers(ticket) -> list[str]:  # noqa: ANN001
    return list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True)
        .order_by("id")
        .values_list("body", flat=True)
    )


def _run(customer, body):  # noqa: ANN001
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body=body)
    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)
    return ticket


@pytest.mark.parametrize(
    "words",
    [
        "I'm thinking about a refund for order {n}, the lid is a bit scratched.",
        "I might want a refund for {n}, I'll let you know.",
        "I'm considering asking for a refund on {n}.",
        "My sister got a refund for {n} and it went fine.",
    ],
)
def test_words_that_do_not_ask_for_a_refund_are_not_paid(sandbox, words):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "B-3301", 8000, sandbox)
    ticket = _run(customer, words.format(n=order.number))

    refunds = [r["amount"] for r in paid(sandbox, order)]
    assert refunds == [], (
        f"the customer wrote {words.format(n=order.number)!r} - no request for a refund - "
        f"and the agent refunded {refunds} cents (answer: {_answers(ticket)[-1:]})"
    )


@pytest.mark.parametrize(
    "words",
    [
        "Refund {n} please, it came damaged on the 3rd",
        "Please refund {n}, it arrived 2 days late",
        "I would like a refund for order {n} as it was not what I ordered",
        "Could you refund {n} when you get a chance?",
    ],
)
def test_a_plain_request_for_the_whole_order_is_acted_on(sandbox, words):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "B-3302", 8000, sandbox)
    ticket = _run(customer, words.format(n=order.number))

    refunds = [r["amount"] for r in paid(sandbox, order)]
    assert refunds == [8000], (
        f"the customer plainly asked {words.format(n=order.number)!r} for the whole $80.00 order; "
        f"the agent refunded {refunds} cents and answered {_answers(ticket)[-1:]}"
    )


@pytest.mark.parametrize(
    "words",
    [
        "Please refund the broken mug from order {n}",
        "Please refund the kettle on order {n}, the rest is fine",
        "Please refund most of {n}",
    ],
)
def test_one_item_of_a_two_item_order_is_not_refunded_as_the_whole_order(sandbox, words):  # noqa: ANN001
    """README: it asks "when the customer wants part without saying how much ("the shipping fee", "one of
    the two mugs")". Naming one item of the order (or "most of" it) is such a part."""
    from tickets.models import OrderLine

    customer = make_customer()
    order = order_for(customer, "B-3303", 8000, sandbox)
    order.lines.all().delete()
    OrderLine.objects.create(order=order, sku="MUG", description="Blue mug", quantity=1, unit_price_cents=2000)
    OrderLine.objects.create(order=order, sku="KTL", description="Kettle", quantity=1, unit_price_cents=6000)
    ticket = _run(customer, words.format(n=order.number))

    refunds = [r["amount"] for r in paid(sandbox, order)]
    assert 8000 not in refunds, (
        f"the customer asked {words.format(n=order.number)!r} - part of a mug + kettle order - and the agent "
        f"refunded the whole order: {refunds} cents (answer: {_answers(ticket)[-1:]})"
    )
