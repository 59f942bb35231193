"""A call asked about again keeps the decision made on it before.

An approval covers the exact arguments it was made on. When a call's arguments no longer match
the approved ones, the agent asks staff again; the earlier request, with who approved what and
when, used to be deleted to make room for the new one (one request per call). Both stay now:
the audit trail (admin, decision history, a state bundle) shows every decision, and what is paid
is what the latest approval covers.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.test import Client

from agents.models import CallStatus, Refund, RefundStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.conftest import make_customer
from tests.state.conftest import export, verify
from tickets import services as ticket_services
from tickets.models import TicketEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.mark.usefixtures("state_bundle_key")  # its bundle is exported and verified
def test_a_refund_asked_about_again_keeps_the_first_decision_and_pays_what_the_second_covers(
    sandbox,  # noqa: ANN001
    approver,  # noqa: ANN001
    tmp_path,  # noqa: ANN001
) -> None:
    customer = make_customer()
    order = order_for(customer, "K-4101", 60000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund K-4101 please")
    model = Refunds(("K-4101", 30000))
    advance(ticket.pk, model=model)
    first = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=first.pk, user=approver, approve=True, note="Damaged, fine.")

    # Before the agent applies the approval, the call's arguments change (an operator's edit in the
    # database): the approval was not made on these, so the agent must ask again.
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    ToolCall.objects.filter(pk=call.pk).update(arguments={"order_number": "K-4101", "amount_cents": 45000})
    advance(ticket.pk, model=model)

    assert paid(sandbox, order) == []
    requests = list(ApprovalRequest.objects.filter(tool_call=call).order_by("requested_at", "id"))
    assert [(r.pk, r.status) for r in requests] == [(first.pk, ApprovalStatus.APPROVED), (requests[1].pk, "pending")]
    kept = requests[0]
    assert kept.decided_by_id == approver.pk and kept.note == "Damaged, fine." and kept.amount_cents == 30000
    second = requests[1]
    assert second.amount_cents == 45000 and "arguments changed" in second.reason
    asked = TicketEvent.objects.filter(ticket=ticket, kind="approval_requested").order_by("seq")
    assert [e.payload.get("asked_before") for e in asked] == [None, first.pk]

    # The decision history shows the first decision, and that it was asked again under another request.
    client = Client()
    client.force_login(approver)
    page = client.get("/staff/approvals/history/", {"ticket": ticket.pk}).content.decode()
    assert f"then asked again as #{second.pk}" in page, page

    # Only one request of a call waits at a time, whatever writes it.
    with pytest.raises(IntegrityError), transaction.atomic():
        ApprovalRequest.objects.create(
            ticket=ticket,
            tool_call=call,
            tool_name=call.name,
            arguments=call.arguments,
            arguments_digest=second.arguments_digest,
            reason="a duplicate",
            expires_at=second.expires_at,
        )

    approval_services.approval_decide(approval_id=second.pk, user=approver, approve=True, note="Both items, fine.")
    advance(ticket.pk, model=model)
    assert [r["amount"] for r in paid(sandbox, order)] == [45000]
    assert Refund.objects.get(ticket=ticket).status == RefundStatus.SUCCEEDED
    assert ToolCall.objects.get(pk=call.pk).status == CallStatus.SUCCEEDED
    assert_money_invariants(sandbox)

    # A bundle of the ticket carries both requests, and its check finds the refund covered.
    status, report = verify(export(tmp_path, ticket))
    assert status == 0, report
