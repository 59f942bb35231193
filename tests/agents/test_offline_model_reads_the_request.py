"""The offline model (the default model) refunds what the customer's words ask for, and nothing else.

It reads the clauses that ask for a refund: not another order named in the message, not another
dollar amount, nothing when the customer says they want none, and "$1,200.00" is an amount, not
a crash. When it cannot tell which order or how much, it asks. With the customer's Confirm turned
off (REFUND_CUSTOMER_CONFIRMATION=0, or the policy's ``customer_confirms_refunds``) the provider
would pay whatever it asks for, so each test reads the payment sandbox's own records.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, ToolCall
from agents.runner import advance
from tests.agents.conftest import quick_provider_retries, retry_time_comes, rung_again_and_again  # noqa: F401 (a fixture)
from tests.agents.test_money_path import order_for, paid
from tests.approvals.test_approvals import provider_refunds
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def open_ticket(customer, body):  # noqa: ANN001
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Help", body=body)
    return ticket


def agent_replies(ticket) -> list[str]:  # noqa: ANN001
    return list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True)
        .order_by("id")
        .values_list("body", flat=True)
    )


def run_the_agent(ticket) -> None:  # noqa: ANN001
    from agents.offline_model import OfflineDeterministicModel

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)


def test_the_order_refunded_is_the_one_the_customer_asked_to_refund(sandbox):
    """The customer names two orders, one to say it is fine, one to refund. The model takes the
    first order number in the message and refunds it in full: the order that arrived fine is paid
    back, the broken one is not."""
    customer = make_customer()
    fine = order_for(customer, "A-7201", 3000, sandbox)
    broken = order_for(customer, "B-7202", 8000, sandbox)
    ticket = open_ticket(
        customer, f"My order {fine.number} arrived fine, but please refund order {broken.number}, it was broken."
    )

    run_the_agent(ticket)

    assert paid(sandbox, fine) == [], "the order the customer said arrived fine was refunded"


def test_the_amount_refunded_is_the_amount_the_customer_asked_for(sandbox):
    """ "Order B-... cost $80.00; please refund $10.00 of it": the model takes the first dollar
    amount in the message, so the whole $80.00 is paid back instead of $10.00."""
    customer = make_customer()
    order = order_for(customer, "B-7301", 8000, sandbox)
    ticket = open_ticket(customer, f"Order {order.number} cost $80.00; please refund $10.00 of it for the scratch.")

    run_the_agent(ticket)

    amounts = [r["amount"] for r in paid(sandbox, order)]
    assert sum(amounts) <= 1000, f"the customer asked for $10.00 and was refunded {amounts} cents"


def test_a_customer_who_says_they_want_no_refund_is_not_refunded(sandbox):
    """ "I do not want a refund for B-..., just tell me where it is": the words "refund" and an order
    number are all the model looks for, so the whole order is paid back."""
    customer = make_customer()
    order = order_for(customer, "B-7401", 8000, sandbox)
    ticket = open_ticket(customer, f"I do not want a refund for {order.number}, just tell me where it is.")

    run_the_agent(ticket)

    assert paid(sandbox, order) == [], "the customer said they want no refund, and was refunded"


def test_two_orders_named_for_a_refund_are_not_guessed_between(sandbox):
    """ "Refund A-... or B-..." names two orders for the refund: nothing is refunded, the agent asks which."""
    customer = make_customer()
    first = order_for(customer, "A-7501", 3000, sandbox)
    second = order_for(customer, "B-7502", 8000, sandbox)
    ticket = open_ticket(customer, f"Please refund {first.number} or maybe {second.number}, whichever is easier.")

    run_the_agent(ticket)

    assert paid(sandbox, first) == [] and paid(sandbox, second) == []
    assert not ToolCall.objects.filter(ticket=ticket, name="issue_refund").exists()
    assert agent_replies(ticket) == [f"Which order would you like me to refund: {first.number} or {second.number}?"]


def test_part_of_an_order_without_an_amount_is_asked_not_refunded_in_full(sandbox):
    """ "Refund half of B-..." says part of the order without an amount: the agent asks how much."""
    customer = make_customer()
    order = order_for(customer, "B-7601", 8000, sandbox)
    ticket = open_ticket(customer, f"Could you refund half of {order.number}? One of the two mugs broke.")

    run_the_agent(ticket)

    assert paid(sandbox, order) == []
    (reply,) = agent_replies(ticket)
    assert f"How much of order {order.number} would you like refunded?" in reply, reply


def order_in(sandbox, *, number: str, total_cents: int, currency: str):  # noqa: ANN001
    customer = make_customer()
    order = make_order(customer, total_cents=total_cents, number=number)
    order.currency = currency
    order.save(update_fields=["currency"])
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    return customer, order


@pytest.mark.parametrize(
    ("currency", "total", "asked", "asked_cents"),
    [("eur", 15000, "€20", 2000), ("eur", 15000, "20 EUR", 2000), ("jpy", 15000, "¥500", 500)],
)
def test_a_partial_refund_asked_in_the_orders_own_currency_is_not_paid_as_the_whole_order(
    sandbox,
    currency,
    total,
    asked,
    asked_cents,  # noqa: ANN001
):
    customer, order = order_in(sandbox, number="E-7101", total_cents=total, currency=currency)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body=f"Please refund {asked} of order E-7101, one item was missing"
    )

    advance(ticket.pk)

    paid = sum(r["amount"] for r in provider_refunds(sandbox, order))
    assert paid <= asked_cents, f"asked for {asked}, the provider refunded {paid} of {total} (minor units)"


def test_an_amount_written_with_a_thousands_separator_is_asked_for_not_a_crash(sandbox):  # noqa: ANN001
    customer, order = order_in(sandbox, number="A-7102", total_cents=150000, currency="usd")
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $1,000.00 of order A-7102, it arrived broken"
    )

    for _ in range(3):  # the step and its retries
        advance(ticket.pk)
        retry_time_comes(ticket.pk)

    run = AgentRun.objects.get(ticket=ticket)
    assert not run.last_error, run.last_error
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.arguments["amount_cents"] == 100000  # above the threshold: it waits for staff
    assert call.status == "awaiting_approval"


def test_an_amount_in_another_currency_than_the_orders_is_asked_again(sandbox):  # noqa: ANN001
    """ "$20" on an order paid in euros: not converted, not refunded in full; the agent asks in EUR."""
    customer, order = order_in(sandbox, number="E-7201", total_cents=15000, currency="eur")
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $20 of order E-7201"
    )

    advance(ticket.pk)

    assert provider_refunds(sandbox, order) == []
    (reply,) = agent_replies(ticket)
    assert "How much of order E-7201 would you like refunded? Tell me the amount in EUR" in reply, reply


@pytest.mark.parametrize("number", ["ORD-24010", "EU-2024-00017"])
def test_an_order_number_with_a_longer_prefix_is_read_and_refunded(sandbox, number):  # noqa: ANN001
    """Order numbers are the shop's own ("ORD-24010", "EU-2024-00017", not only "A-1001"): the
    model reads them, so a plain request for one is refunded, once, in full."""
    customer, order = order_in(sandbox, number=number, total_cents=3000, currency="usd")
    ticket = open_ticket(customer, f"Please refund order {number}, it never arrived.")

    run_the_agent(ticket)

    assert [r["amount"] for r in paid(sandbox, order)] == [3000], agent_replies(ticket)
