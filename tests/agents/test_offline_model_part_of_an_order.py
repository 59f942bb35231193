"""Asked for part of an order, the offline model asks how much instead of refunding the whole order.

With the customer's Confirm off (``REFUND_CUSTOMER_CONFIRMATION=0`` or the policy's
``customer_confirms_refunds``, the suite's default) what the model asks for under the threshold is
paid. The README promises the offline model "asks for no more than the customer clearly asked" and
"asks instead of guessing when ... the customer wants part without saying how much". None of
these phrasings is paid as it stands: the model asks (``agents.offline_model.refund_asked``).
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


def _refunded(sandbox, order) -> list[int]:  # noqa: ANN001
    return [r["amount"] for r in paid(sandbox, order)]


@pytest.mark.parametrize(
    "words",
    [
        # the limit is in the next clause or sentence, which names no "refund"
        "Please refund order {n}, but only the $20 for the missing mug.",
        "Please refund order {n}. Just $20 though, the rest arrived fine.",
        # a part of the order named without an amount
        "Please refund the shipping fee for order {n}.",
        "Please refund the missing item from order {n}.",
        "Please refund one of the two mugs in order {n}.",
        # all of it except an amount
        "Please refund all but $10 of order {n}.",
    ],
)
def test_a_customer_who_asks_for_part_of_an_order_is_not_refunded_the_whole_order(sandbox, words):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "R-2701", 8000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=words.format(n=order.number))

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)

    refunds = _refunded(sandbox, order)
    assert 8000 not in refunds, (
        f"the customer asked for part of order {order.number} ({words.format(n=order.number)!r}) "
        f"and the whole order was refunded: provider refunds {refunds} cents"
    )


def test_a_limit_sent_in_a_second_message_before_the_answer_is_not_ignored(sandbox):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "R-2702", 8000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body=f"Please refund order {order.number}."
    )
    write(ticket, "Only $20 of it, for the missing mug; the rest arrived fine.")

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)

    refunds = _refunded(sandbox, order)
    assert 8000 not in refunds, (
        f"the customer limited the refund to $20 before any answer and the whole order was refunded: {refunds} cents"
    )
