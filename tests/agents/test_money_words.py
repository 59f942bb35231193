"""Money reads one way along a whole refund: "$49.99" in the customer's chat, the agent's words, the
timeline, the staff pages, the approval dashboard and the admin; never "49.99 USD" or "4999 cents"."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client
from django.urls import reverse

from agents.models import Refund, RefundStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalPolicy, ApprovalRequest
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer, make_order
from tests.staff.conftest import make_support_staff
from tickets import presenters, selectors
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

# "49.99 USD", "USD 49.99", "4999 cents", "usd 49.99": an amount beside a currency code or in cents.
CODE_OR_CENTS = re.compile(r"\d[\d,]*(?:\.\d+)?\s*(?:USD|usd)\b|\b(?:USD|usd)\s*\d|\b\d+\s*cents\b")
# Any amount with cents that no currency symbol stands right before ("49.99" alone).
BARE_AMOUNT = re.compile(r"(?<![$€£\d,.:])\d{1,3}(?:,\d{3})*\.\d\d(?![\d.])")


def odd_amounts(text: str, *, strict: bool = True) -> list[str]:
    found = [m.group(0) for m in CODE_OR_CENTS.finditer(text)]
    if strict:
        found += [m.group(0) for m in BARE_AMOUNT.finditer(text)]
    return found


def test_the_scan_itself_catches_the_old_spellings():
    assert odd_amounts("Refund of 49.99 USD issued") == ["49.99 USD", "49.99"]
    assert odd_amounts("total 4999 cents") == ["4999 cents"]
    assert odd_amounts("refunded 1,049.99 to you") == ["1,049.99"]
    assert odd_amounts("Refund of $49.99 issued; $1,049.99 in all") == []


def _chat_log(html: str) -> str:
    """The visible conversation of the customer's chat page, tags dropped."""
    start, end = html.index('id="chat-log"'), html.index("</ol>", html.index('id="chat-log"'))
    return re.sub(r"<[^>]+>", " ", html[start:end])


def test_a_refund_reads_in_one_money_format_for_the_customer_staff_admin_and_email(sandbox):
    policy = ApprovalPolicy.current()
    policy.refund_threshold_cents = 1000  # so that this refund waits for a person's approval
    policy.save()
    bob = make_customer("bob-money-words")
    order = make_order(bob, total_cents=4999, number="M-4999")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket, _ = ticket_services.ticket_open(
        customer=bob, subject="Broken kettle", body="Please refund $49.99 on order M-4999, it arrived broken"
    )
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approver = make_staff("money-words-approver", can_decide=True)
    client = Client()
    client.force_login(approver)
    dashboard = client.get(reverse("approvals:pending")).content.decode()
    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk)
    ticket_services.message_post(
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=bob.user, body="Thanks! Please email me a summary"
    )
    advance(ticket.pk)

    assert Refund.objects.get(order=order).status == RefundStatus.SUCCEEDED
    # What the customer reads: the agent's and the team's messages, the chat's lines, the page, the email.
    messages = list(
        Message.objects.filter(ticket=ticket, is_public=True)
        .exclude(author_kind=AuthorKind.CUSTOMER)
        .values_list("body", flat=True)
    )
    items, _ = presenters.present_events(selectors.ticket_timeline(ticket=ticket, public_only=True))
    lines = [item["text"] for item in items if "text" in item and item.get("author") != AuthorKind.CUSTOMER]
    client.force_login(bob.user)
    chat = _chat_log(client.get(reverse("tickets:chat", args=[ticket.pk])).content.decode())
    emails = [f"{m.subject}\n{m.body}" for m in mail.outbox]
    assert any("I've refunded $49.99 on order M-4999" in m for m in messages), messages
    assert "Refund of $49.99 issued" in lines, lines
    assert "Refund of $49.99 issued" in chat and "I&#x27;ve refunded $49.99" in chat
    assert len(emails) == 1
    for text in [*messages, *lines, chat, *emails]:
        assert odd_amounts(text) == [], text

    # What staff and the admin read (times and durations there have dots too: codes and cents only).
    person = make_support_staff("money-words-person")
    client.force_login(person)
    staff_page = client.get(reverse("staff:ticket", args=[ticket.pk])).content.decode()
    admin = get_user_model().objects.create_superuser("money-words-admin", "admin@example.test", "pw-for-tests-123")
    client.force_login(admin)
    admin_pages = [
        client.get(reverse("admin:agents_refund_changelist")).content.decode(),
        client.get(reverse("admin:agents_refund_change", args=[Refund.objects.get(order=order).pk])).content.decode(),
        client.get(reverse("admin:approvals_approvalrequest_changelist")).content.decode(),
        client.get(reverse("admin:tickets_order_change", args=[order.pk])).content.decode(),
    ]
    assert "$49.99" in dashboard and "total $49.99" in dashboard
    assert "$49.99" in staff_page and "Refund of $49.99 issued" in staff_page
    for page in [dashboard, staff_page, *admin_pages]:
        assert "$49.99" in page
        assert odd_amounts(page, strict=False) == []
    assert str(Refund.objects.get(order=order)).startswith("refund $49.99 on")
    assert Ticket.objects.get(pk=ticket.pk).refunds.count() == 1
