"""A question or a condition about a refund is not paid as a request by the offline model: it asks first.

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
from tests.agents.test_money_path import order_for, paid
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
        # questions, which the model is meant to answer, not pay
        "Can you tell me if order {n} can be refunded?",
        "Will you refund order {n} if I send it back?",
        "Could you let me know when the refund for order {n} will arrive?",
        # a condition that has not happened
        "If it hasn't arrived by Friday, please refund order {n}.",
        "Please refund order {n} only if you cannot send a replacement.",
        "Please refund order {n} unless you can send a replacement.",
    ],
)
def test_a_question_or_a_condition_is_not_paid_as_a_request(sandbox, words):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "R-2704", 8000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=words.format(n=order.number))

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)

    refunds = _refunded(sandbox, order)
    assert refunds == [], (
        f"the customer wrote {words.format(n=order.number)!r} (a question or a condition, no request yet) "
        f"and was refunded {refunds} cents"
    )
