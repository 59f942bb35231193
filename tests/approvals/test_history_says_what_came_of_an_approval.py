"""The decision history says, beside "Approved", when what was approved was not done: waiting for
the customer's Confirm, or not confirmed by them (cancelled, or not in time). Only a call stopped
by a person or by the customer's later words said so; an approved refund the customer then
cancelled at its Confirm read as "Approved" and nothing else, as if it had been paid."""

from __future__ import annotations

import re

import pytest

from agents.confirmation import confirmation_decide
from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals import services
from tests.approvals.test_dashboard import paused

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120), pytest.mark.customer_confirms]


def history_row(client, approval_id: int) -> str:  # noqa: ANN001
    page = client.get("/staff/approvals/history/").content.decode()
    row = page[page.index(f"<tr><td>{approval_id}</td>") :]
    return " ".join(re.sub(r"<[^>]+>", " ", row[: row.index("</tr>")]).split())


def test_an_approved_refund_not_confirmed_by_the_customer_reads_as_not_done(sandbox, client, approver):  # noqa: ANN001
    ticket, approval = paused(sandbox, "H-1001")
    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk)  # the approval applied: the customer is asked to confirm
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_CONFIRMATION
    client.force_login(approver)

    assert "then waiting for the customer to confirm it: not done yet" in history_row(client, approval.pk)

    confirmation_decide(
        ticket_id=ticket.pk, call_id=call.pk, user=ticket.customer.user, confirm=False,
        digest=call.confirmation_digest,
    )  # fmt: skip
    advance(ticket.pk)

    row = history_row(client, approval.pk)
    assert "Approved" in row
    assert "then not confirmed by the customer (the customer cancelled): nothing was done" in row


def test_an_approved_refund_that_was_paid_reads_as_approved_and_nothing_more(sandbox, client, approver):  # noqa: ANN001
    ticket, approval = paused(sandbox, "H-1002")
    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    confirmation_decide(
        ticket_id=ticket.pk, call_id=call.pk, user=ticket.customer.user, confirm=True,
        digest=call.confirmation_digest,
    )  # fmt: skip
    advance(ticket.pk)
    assert ToolCall.objects.get(pk=call.pk).status == CallStatus.SUCCEEDED
    client.force_login(approver)

    row = history_row(client, approval.pk)
    assert "Approved" in row and " then " not in row
