"""The offline model pays no larger amount and no other order than the customer asked for.

It asks when another amount is named beside the one asked (compared as amounts: "$15" is not
part of "$150"), when a later clause corrects the order or the amount ("I mean ...", "Correction:",
"B-2, not A-1"), when an item of a several-item order is named ("for the broken mug"), and when an
amount cannot be read ("$.50", "ten dollars"); it reads an order number whole ("R-4102-2" is not
"R-4102"). The suite's default has the customer's Confirm off, so what the model asks for under the
threshold is paid at once.
"""

from __future__ import annotations

import pytest

from agents.offline_model import OfflineDeterministicModel
from tests.agents.conftest import rung_again_and_again
from tests.agents.test_money_path import order_for, paid, write
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.parametrize(
    ("asked", "then"),
    [
        # The correction names an amount whose text is a prefix of the asked one ("$15" in "$150").
        ("Please refund order {n} $150", "Typo, sorry: $15."),
        ("Please refund order {n} $150. Sorry, it should be $15.", ""),
    ],
)
def test_a_smaller_amount_named_outside_the_request_is_not_overridden_by_a_larger_one(sandbox, asked, then):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "R-4101", 18000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=asked.format(n=order.number))
    if then:
        write(ticket, then)
    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)
    refunds = [r["amount"] for r in paid(sandbox, order)]
    assert 15000 not in refunds, (
        f"the customer wrote {asked!r} then {then!r} (corrected to $15.00) and was refunded {refunds} cents"
    )


def test_an_order_number_with_a_suffix_is_not_read_as_another_order(sandbox):  # noqa: ANN001
    customer = make_customer()
    first = order_for(customer, "R-4102", 9000, sandbox)
    second = order_for(customer, "R-4102-2", 3000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body=f"Please refund order {second.number}."
    )
    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)
    wrong = [r["amount"] for r in paid(sandbox, first)]
    assert wrong == [], (
        f"the customer asked to refund order {second.number} and order {first.number} was refunded: {wrong} cents"
    )


@pytest.mark.parametrize(
    "words",
    [
        "Please refund order {n} for the broken mug.",
        "Please refund order {n} for the kettle, the mug is fine.",
        # an amount the model cannot read, which is not the whole order
        "Please refund $.50 on order {n}, the lid was scratched.",
        "Please refund order {n}, ten dollars is enough.",
    ],
)
def test_part_of_an_order_named_after_its_number_is_not_refunded_as_the_whole_order(sandbox, words):  # noqa: ANN001
    """An item of the order named after its number, or an amount that cannot be read: how much is
    asked, never taken to be the whole order."""
    from tickets.models import OrderLine

    customer = make_customer()
    order = order_for(customer, "R-4103", 8000, sandbox)
    order.lines.all().delete()
    OrderLine.objects.create(order=order, sku="MUG", description="Blue mug", quantity=1, unit_price_cents=2000)
    OrderLine.objects.create(order=order, sku="KTL", description="Kettle", quantity=1, unit_price_cents=6000)
    written = words.format(n=order.number)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=written)
    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)
    refunds = [r["amount"] for r in paid(sandbox, order)]
    assert 8000 not in refunds, (
        f"the customer asked {written!r} (part of a mug + kettle order) and the whole order was refunded: "
        f"{refunds} cents"
    )


@pytest.mark.parametrize(
    "then",
    [
        "Sorry, I mean {meant}.",
        "Correction: {meant}.",
        "{meant}, not {wrong}, sorry.",
    ],
)
def test_an_order_number_corrected_in_a_second_message_does_not_refund_the_first(sandbox, then):  # noqa: ANN001
    """A later message that changes the order ("I mean ...", "Correction: ...", "B-2, not A-1") makes
    the model ask which order, before anything is paid."""
    customer = make_customer()
    wrong = order_for(customer, "R-4104", 8000, sandbox)
    meant = order_for(customer, "R-4105", 6000, sandbox)
    body = f"Please refund order {wrong.number}."
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=body)
    write(ticket, then.format(meant=meant.number, wrong=wrong.number))
    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)
    refunds = [r["amount"] for r in paid(sandbox, wrong)]
    assert refunds == [], (
        f"the customer corrected the order to {meant.number} ({then!r}) before any answer and "
        f"{wrong.number} was refunded: {refunds} cents"
    )
