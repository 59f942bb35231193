"""A customer who asks to cancel a refund the agent has already paid (they wrote after staff approved
it, before it was carried out) is told it was already issued. The offline model read "Please cancel the
refund" as a question for the help centre and answered "I couldn't find a help article about that"."""

from __future__ import annotations

import pytest

from agents.runner import advance
from approvals import services
from approvals.models import ApprovalRequest
from tests.approvals.conftest import make_staff
from tests.approvals.test_approvals import provider_refunds, refund_ticket, replies
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_cancel_written_after_the_approval_is_told_the_refund_was_already_issued(sandbox):  # noqa: ANN001
    approver = make_staff("cancel-approver", can_decide=True)
    ticket, order = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="Please cancel the refund, it works again."
    )
    advance(ticket.pk)
    advance(ticket.pk)

    assert [r["amount"] for r in provider_refunds(sandbox, order)] == [64900]
    answer = replies(ticket)[-1]
    assert "help article" not in answer
    assert "already" in answer and "$649.00" in answer and "P-1001" in answer, answer
