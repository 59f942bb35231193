"""A bundle whose second refund on one order reads as needing no approval is refused, as one above the
threshold is.

``verify`` and ``restore`` judged a waiting call by its own rules alone (its amount against the threshold,
its currency, the tools always reviewed). A second refund on an order (a first already paid, or asked for
before it and still to come) always waits for staff, whatever its amount: $150.00 waiting for staff behind
a $150.00 refund paid on the same order, edited to read as one recorded to run unreviewed, was under the
threshold's number, passed both, and the new deployment's agent paid the order back twice, reviewed by
nobody. So did one asked again on an order staff declined a refund on.
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus, Refund, RefundStatus, RunStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import Refunds
from tests.approvals.conftest import make_staff
from tests.state.conftest import export, rewrite_part, verify
from tests.state.test_bundle import customer_with_paid_order, edited_bundle_pays_nothing
from tests.state.test_verify_refuses_a_waiting_refund_that_reads_unreviewed import _running, _unreviewed, _withdrawn
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

SAYS = "no call still to run reads as needing no approval its rules ask"


def _edited(path) -> None:  # noqa: ANN001
    rewrite_part(path, "agents.ToolCall", _unreviewed)
    rewrite_part(path, "agents.AgentRun", _running)
    rewrite_part(path, "approvals.ApprovalRequest", _withdrawn)


def test_a_second_refund_on_a_paid_order_edited_to_run_unreviewed_is_refused(tmp_path, sandbox):  # noqa: ANN001
    customer, order = customer_with_paid_order(sandbox, "Q-7801", 30000)
    first, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund $150 on Q-7801")
    advance(first.pk, model=Refunds(("Q-7801", 15000)))
    assert Refund.objects.get(ticket=first).status == RefundStatus.SUCCEEDED
    second, _ = ticket_services.ticket_open(customer=customer, subject="Again", body="Refund $150 on Q-7801 again")
    assert advance(second.pk, model=Refunds(("Q-7801", 15000))).state == RunStatus.WAITING_APPROVAL
    assert "second refund on order Q-7801" in ToolCall.objects.get(ticket=second).approval_reason
    path = export(tmp_path, first, second, include_personal_data=True)
    assert verify(path)[0] == 0
    _edited(path)

    edited_bundle_pays_nothing(
        path,
        second,
        refused_for="approval",
        verify_says=(SAYS, "a second refund on order Q-7801"),
        edited="second $150.00 refund on Q-7801 was edited to run unreviewed",
    )


def test_a_refund_asked_again_after_staff_declined_one_on_the_order_edited_to_run_unreviewed_is_refused(
    tmp_path,
    sandbox,  # noqa: ANN001
):
    customer, _ = customer_with_paid_order(sandbox, "Q-7802", 50000)
    first, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund $300 on Q-7802")
    advance(first.pk, model=Refunds(("Q-7802", 30000)))
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(ticket=first).pk,
        user=make_staff("declines", can_decide=True),
        approve=False,
        note="the parcel came back empty",
    )
    advance(first.pk, model=Refunds(("Q-7802", 30000)))
    assert ToolCall.objects.get(ticket=first).status == CallStatus.REJECTED
    second, _ = ticket_services.ticket_open(customer=customer, subject="Again", body="Refund $50 on Q-7802 then")
    assert advance(second.pk, model=Refunds(("Q-7802", 5000))).state == RunStatus.WAITING_APPROVAL
    path = export(tmp_path, first, second, include_personal_data=True)
    assert verify(path)[0] == 0
    _edited(path)

    edited_bundle_pays_nothing(
        path,
        second,
        refused_for="approval",
        verify_says=SAYS,
        edited="$50 refund asked again after staff declined one on its order was edited to run unreviewed",
    )
