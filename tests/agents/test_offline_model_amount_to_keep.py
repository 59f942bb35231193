"""The offline model never refunds the amount a customer keeps ("refund X except/minus $10"): it asks.

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
        "Please refund order {n} except the $10 shipping.",
        "Please refund order {n} minus the $10 shipping.",
    ],
)
def test_an_amount_to_keep_is_not_refunded_as_the_amount_asked(sandbox, words):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "R-2703", 8000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=words.format(n=order.number))

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)

    refunds = _refunded(sandbox, order)
    assert refunds in ([], [7000]), (
        f"the customer asked for {words.format(n=order.number)!r} ($70.00 or a question) and was refunded "
        f"{refunds} cents"
    )
