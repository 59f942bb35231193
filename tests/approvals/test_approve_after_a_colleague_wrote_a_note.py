"""An approval sent from a dashboard read before a colleague wrote an internal note on the ticket ("do
not refund: the parcel came back empty") is refused, nothing changed, as one read before the customer
wrote again is: the card shows the ticket's notes in its conversation, and the note is how the team
tells the person deciding to hold on; approved from the stale card, the refund was paid with the note
unread. Sent from the page read after it, the approval stands; one's own note refuses nothing."""

from __future__ import annotations

import uuid

import pytest

from agents.models import CallStatus, Refund, ToolCall
from agents.runner import advance
from approvals.models import ApprovalStatus
from tests.approvals.test_approvals import provider_refunds
from tests.approvals.test_approve_after_the_customer_wrote import approve_form
from tests.approvals.test_dashboard import paused
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services
from tickets.models import Order

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

NOTE = "Do not refund: the parcel came back empty."


def test_an_approval_from_a_page_read_before_a_colleague_wrote_a_note_is_refused(sandbox, client, approver):
    ticket, approval = paused(sandbox, "W-2001")
    client.force_login(approver)
    read_before = approve_form(client.get("/staff/approvals/").content.decode(), approval.pk)

    colleague = make_support_staff("li")
    ticket_services.staff_note(ticket=ticket.pk, user=colleague, body=NOTE, client_msg_id=uuid.uuid4().hex)

    refused = client.post(f"/staff/approvals/{approval.pk}/decide/", read_before)

    approval.refresh_from_db()
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    advance(ticket.pk)
    order = Order.objects.get(number="W-2001")
    assert (approval.status, call.approval_decision) == (ApprovalStatus.PENDING, None), (
        f"approved from a card read before li's note {NOTE!r}: the refund went on to be paid "
        f"({len(provider_refunds(sandbox, order))} at the provider)"
    )
    assert refused.status_code == 409
    page = refused.content.decode()
    assert "note" in page and "nothing was changed" in page
    assert NOTE in page  # the card shows it now
    call.refresh_from_db()
    assert call.status == CallStatus.AWAITING_APPROVAL
    assert not Refund.objects.filter(tool_call=call).exists() and provider_refunds(sandbox, order) == []

    # Approved from the page that shows the note, it stands.
    assert client.post(f"/staff/approvals/{approval.pk}/decide/", approve_form(page, approval.pk)).status_code == 302
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED


def test_the_deciders_own_note_does_not_refuse_their_approval(sandbox, client, approver):
    ticket, approval = paused(sandbox, "W-2002")
    client.force_login(approver)
    read_before = approve_form(client.get("/staff/approvals/").content.decode(), approval.pk)
    ticket_services.staff_note(
        ticket=ticket.pk, user=approver, body="Checked the photos: fine.", client_msg_id=uuid.uuid4().hex
    )

    assert client.post(f"/staff/approvals/{approval.pk}/decide/", read_before).status_code == 302
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED
