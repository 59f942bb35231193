"""An approval sent from a dashboard read before the customer wrote again ("please cancel the
refund") is refused, nothing changed: the card did not show the message (the dashboard refreshes
on approvals, not on customer messages), and an approved refund is paid on resume without the
model reading it. Sent from the page read after the message, it is decided as usual."""

from __future__ import annotations

import re

import pytest

from agents.models import CallStatus, Refund, ToolCall
from agents.runner import advance
from approvals.models import ApprovalStatus
from tests.approvals.test_dashboard import paused
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def approve_form(page: str, approval_id: int) -> dict[str, str]:
    """The fields the card's Approve form holds, as a browser posts them (the amount ticked)."""
    card = page[page.index(f'id="approval-{approval_id}"') :]
    form = card[: card.index("</form>")]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))
    ticked = re.search(r'name="confirm_amount" value="([^"]+)"', form)
    return {**fields, "note": "", **({"confirm_amount": ticked[1]} if ticked else {})}


def test_an_approval_from_a_page_read_before_the_customer_wrote_again_is_refused(sandbox, client, approver):
    ticket, approval = paused(sandbox, "W-1001")
    client.force_login(approver)
    read_before = approve_form(client.get("/staff/approvals/").content.decode(), approval.pk)

    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="Please cancel the refund, it works again now."
    )
    advance(ticket.pk)  # the customer is told their message waits for the decision

    refused = client.post(f"/staff/approvals/{approval.pk}/decide/", read_before)
    assert refused.status_code == 409
    page = refused.content.decode()
    assert "wrote" in page and "nothing was changed" in page
    assert "Please cancel the refund, it works again now." in page  # the card shows it now
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert (call.status, call.approval_decision) == (CallStatus.AWAITING_APPROVAL, None)
    advance(ticket.pk)
    assert not Refund.objects.filter(tool_call=call).exists()

    # Decided from the page that shows the message, it stands.
    read_after = approve_form(page, approval.pk)
    assert client.post(f"/staff/approvals/{approval.pk}/decide/", read_after).status_code == 302
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED
