"""A customer who asks to cancel a refund the agent has already paid (they wrote as staff's approved
refund was being sent) is told it was already issued. The offline model read "Please cancel the
refund" as a question for the help centre and answered "I couldn't find a help article about that".
(Written after the approval and before the refund was sent, the message stops it:
tests/agents/test_customer_wrote_after_the_approval.py.)"""

from __future__ import annotations

import pytest

from agents import refunds as refund_module
from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals import services
from approvals.models import ApprovalRequest
from tests.approvals.conftest import make_staff
from tests.approvals.test_approvals import provider_refunds, refund_ticket, replies
from tickets import services as ticket_services
from tickets.models import AuthorKind, TicketEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_cancel_written_as_the_approved_refund_is_sent_is_told_it_was_already_issued(sandbox, monkeypatch):  # noqa: ANN001
    approver = make_staff("cancel-approver", can_decide=True)
    ticket, order = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    provider = refund_module.provider()
    sending = provider.create_refund

    def written_as_it_is_sent(**kwargs):  # noqa: ANN003, ANN202
        ticket_services.message_post(
            ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="Please cancel the refund, it works again."
        )
        return sending(**kwargs)

    monkeypatch.setattr(provider, "create_refund", written_as_it_is_sent)
    advance(ticket.pk)
    monkeypatch.undo()
    advance(ticket.pk)

    assert [r["amount"] for r in provider_refunds(sandbox, order)] == [64900]
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status == CallStatus.SUCCEEDED
    assert not TicketEvent.objects.filter(ticket=ticket, kind="approved_call_withdrawn").exists()
    answer = replies(ticket)[-1]
    assert "help article" not in answer
    assert "already" in answer and "$649.00" in answer and "P-1001" in answer, answer
