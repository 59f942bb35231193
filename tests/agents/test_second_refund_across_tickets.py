"""A second refund on one order needs a staff approval whichever ticket asked for the first
(DESIGN.md, invariant 11): a customer refunded $40 for a broken item on an $80 order who opens a
new ticket and asks for the same $40 again is not paid twice unreviewed (both stay under the
order threshold and the per-customer limit; the second has a new idempotency key).
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus
from agents.runner import advance
from tests.agents.test_money_gates import Refunds, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.parametrize("model", ["scripted", "offline"])
def test_the_same_refund_asked_again_in_a_new_ticket_is_not_paid_twice_unreviewed(sandbox, model):  # noqa: ANN001
    agent = Refunds(("R-2001", 4000)) if model == "scripted" else None
    customer = make_customer()
    order = order_for(customer, "R-2001", 8000, sandbox)
    body = "Order R-2001 arrived broken, please refund $40.00"
    first_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Broken mug", body=body)
    advance(first_ticket.pk, model=agent)
    assert [r["amount"] for r in paid(sandbox, order)] == [4000]

    second_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Broken mug", body=body)
    advance(second_ticket.pk, model=agent)

    (again,) = refund_calls(second_ticket)
    assert [r["amount"] for r in paid(sandbox, order)] == [4000], "the same request was paid twice, unreviewed"
    assert again.approval_required and again.status == CallStatus.AWAITING_APPROVAL, (
        again.status,
        again.approval_reason,
    )
    assert "second refund on order R-2001 (the first was asked for in another ticket)" in again.approval_reason
    assert "already has $40.00 refunded or pending, $40.00 more" in again.approval_reason
