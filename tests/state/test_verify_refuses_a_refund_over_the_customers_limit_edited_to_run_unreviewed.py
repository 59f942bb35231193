"""A bundle whose refund over the customer's limit reads as needing no approval is refused, as one above
the threshold is.

``verify`` and ``restore`` judged a waiting call by its own rules alone (its amount against the threshold,
its currency, the tools always reviewed), and then by what was asked on its order before it. A refund that
takes the customer's refunds in the policy's window above the per-customer limit waits for staff, on
whichever order: $100.00 on one order waiting for staff, behind $150.00 paid on another (the limit: $200.00),
edited to read as one recorded to run unreviewed, passed both, and the new deployment's agent paid it,
reviewed by nobody.
"""

from __future__ import annotations

import pytest

from agents.models import Refund, RefundStatus, RunStatus, ToolCall
from agents.runner import advance
from tests.agents.test_money_gates import Refunds
from tests.conftest import make_order
from tests.state.conftest import export, verify
from tests.state.test_bundle import customer_with_paid_order, edited_bundle_pays_nothing
from tests.state.test_verify_refuses_a_second_refund_edited_to_run_unreviewed import SAYS, _edited
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_a_refund_over_the_customers_limit_edited_to_run_unreviewed_is_refused(tmp_path, sandbox):  # noqa: ANN001
    customer, _ = customer_with_paid_order(sandbox, "Q-7803", 30000)
    other = make_order(customer, number="Q-7804", total_cents=30000)
    sandbox.seed_payment(other.payment_reference, other.total_cents, other.currency)
    first, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund $150 on Q-7803")
    advance(first.pk, model=Refunds(("Q-7803", 15000)))
    assert Refund.objects.get(ticket=first).status == RefundStatus.SUCCEEDED
    second, _ = ticket_services.ticket_open(customer=customer, subject="More", body="And $100 on Q-7804")
    assert advance(second.pk, model=Refunds(("Q-7804", 10000))).state == RunStatus.WAITING_APPROVAL
    assert "refunds to one customer above $200.00" in ToolCall.objects.get(ticket=second).approval_reason
    path = export(tmp_path, first, second, include_personal_data=True)
    assert verify(path)[0] == 0
    _edited(path)

    edited_bundle_pays_nothing(
        path,
        second,
        refused_for="approval",
        verify_says=(SAYS, "above the limit of $200.00"),
        edited="$100.00 refund over the customer's limit was edited to run unreviewed",
    )
