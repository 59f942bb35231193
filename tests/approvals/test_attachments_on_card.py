"""The approval card shows the files the customer sent on the ticket."""

from __future__ import annotations

import pytest

from agents.runner import advance
from approvals.models import ApprovalRequest, ToolApprovalRule
from tests.conftest import make_customer, make_order
from tests.tickets.files import PDF_BYTES, png_bytes, post_with_files
from tickets import services as ticket_services
from tickets.models import Attachment

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_approver_sees_the_customers_photo_and_receipt_on_the_card(client, approver, media):  # noqa: ANN001
    ToolApprovalRule.objects.create(tool_name="lookup_order", requires_approval=True)
    customer = make_customer()
    make_order(customer, number="P-2001")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Damaged", body="It came broken.")
    post_with_files(ticket, [("dent.png", png_bytes()), ("receipt.pdf", PDF_BYTES)], body="Where is P-2001?")
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    photo, receipt = Attachment.objects.order_by("position")
    client.force_login(approver)

    page = client.get("/staff/approvals/").content.decode()
    card = page[page.index(f'id="approval-{approval.pk}"') :]

    assert "Files from the customer (2)" in card
    assert f'<img src="/attachments/{photo.pk}/" alt="dent.png"' in card
    assert f'href="/attachments/{receipt.pk}/" class="file-link" download' in card
    assert client.get(f"/attachments/{photo.pk}/").status_code == 200
