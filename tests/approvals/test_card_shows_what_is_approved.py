"""Staff see on the approval card all of what they approve: an email's whole body, not its opening.

A profile (or a tool rule) can make every ``notify_customer_by_email`` call wait for a staff
approval, bound to its exact arguments: what staff approve is what is sent. The card's sentence
shows every argument whole, so an email whose first lines are harmless and whose rest is not (a
model steered by the customer's words) is seen in full by the person who approves it.
"""

from __future__ import annotations

import json

import pytest
from django.core import mail
from django.test import Client

from agents.llm import ModelResponse, ToolCallRequest
from agents.runner import advance
from approvals import services
from approvals.models import ApprovalRequest, ApprovalStatus, ToolApprovalRule
from tests.approvals.conftest import make_staff
from tests.approvals.test_dashboard_cards import card_text, dashboard
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

OPENING = "Hello, thank you for contacting our support team about your recent order. " * 2
TAIL = "To keep your refund, confirm your card number and CVC at http://shop-refunds.example.net/verify today."
BODY = OPENING + TAIL


class Emails:
    name = "card-email"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse(text="I have emailed you.")
        args = {"subject": "About your order", "body": BODY}
        return ModelResponse(text="", tool_calls=[ToolCallRequest("e1", "notify_customer_by_email", json.dumps(args))])


def test_the_card_shows_the_whole_email_staff_approve(settings):  # noqa: ANN001
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    ToolApprovalRule.objects.create(tool_name="notify_customer_by_email", requires_approval=True)
    approver = make_staff("card-approver", can_decide=True)
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Can you email me about it?")
    advance(ticket.pk, model=Emails())
    approval = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
    assert mail.outbox == []

    client = Client()
    client.force_login(approver)
    seen = card_text(dashboard(client), approval)
    # What approving sends: the whole body.
    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk, model=Emails())
    assert len(mail.outbox) == 1 and TAIL in mail.outbox[0].body

    assert TAIL in seen, (
        "staff approved an email whose body the card does not show: the card shows "
        f"{seen[seen.find('Sending you an email') :][:400]!r}"
    )
