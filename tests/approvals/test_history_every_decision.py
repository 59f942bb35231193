"""Every decision can be found in the decision history: a page at a time, newest first, with the
real total, links to older pages that keep the filter, and a filter by ticket.

README: staff read who approved which refund in the history. It had shown the newest 100 and said
"(100)" as if that were all.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import ToolCall
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.state.conftest import paused_ticket

pytestmark = pytest.mark.django_db


def test_every_decision_can_be_found_in_the_history():
    ticket, _ = paused_ticket()
    template_call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    first = ApprovalRequest.objects.get(tool_call=template_call)
    approver = make_staff("auditor", can_decide=True)
    now = timezone.now()
    # 101 refunds decided over the last weeks, the oldest by "auditor" 30 days ago.
    decided = []
    for i in range(101):
        if i == 0:
            call = template_call
        else:
            call = ToolCall.objects.get(pk=template_call.pk)
            call.pk = None
            call.index = 100 + i
            call.idempotency_key = f"{template_call.idempotency_key}-h{i}"
            call.save()
        approval = first if i == 0 else ApprovalRequest.objects.get(pk=first.pk)
        if i:
            approval.pk = None
            approval.tool_call = call
        approval.status = ApprovalStatus.APPROVED
        approval.decided_by = approver
        approval.decided_at = now - timedelta(days=30) + timedelta(minutes=i)
        approval.note = f"checked receipt {i}"
        approval.save()
        decided.append(approval)
    oldest = decided[0]

    client = Client()
    client.force_login(approver)
    page = client.get("/staff/approvals/history/")
    assert page.status_code == 200
    html = page.content.decode()
    shown = f"<td>{oldest.pk}</td>" in html
    told_there_are_more = "Older decisions" in html and "1 to 100 of 101" in html
    assert not shown and told_there_are_more, (
        "the decision history must show every decision, or say there are more and lead to them: "
        f"approval #{oldest.pk} (approved by auditor, 'checked receipt 0') is missing and the page says "
        "no link to older ones"
    )
    older = client.get("/staff/approvals/history/?page=2").content.decode()
    assert f"<td>{oldest.pk}</td>" in older and "101 to 101 of 101" in older and "Newer decisions" in older
    # The decider filter does not reach it either.
    page = client.get("/staff/approvals/history/?decider=auditor&decision=approved").content.decode()
    assert "decision=approved&amp;decider=auditor&amp;page=2" in page, "the next page must keep the filter"
    page = client.get(f"/staff/approvals/history/?ticket=%23{ticket.pk}&decider=auditor&page=2").content.decode()
    assert f"<td>{oldest.pk}</td>" in page and "of 101" in page and f"on ticket <strong>#{ticket.pk}" in page
    assert "of 101" not in client.get(f"/staff/approvals/history/?ticket={ticket.pk + 1}").content.decode()
