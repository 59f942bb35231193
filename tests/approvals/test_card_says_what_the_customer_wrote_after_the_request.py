"""A card says, before its buttons and outside the folded conversation, what the customer wrote
after the agent asked for the approval ("please cancel the refund"): an approval from a page that
showed it stands (and, with the customer's Confirm turned off, is paid), so the page must show it
where the person deciding reads."""

from __future__ import annotations

import pytest

from approvals.models import ApprovalRequest
from tests.approvals.test_dashboard import paused
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def card_outside_its_conversation(page: str, approval: ApprovalRequest) -> str:
    """The card's text up to its folded conversation: what a person reads without opening it."""
    card = page[page.index(f'id="approval-{approval.pk}"') :]
    return card[: card.index('<details class="conversation">')]


def test_a_card_shows_what_the_customer_wrote_after_the_agent_asked(sandbox, client, approver):  # noqa: ANN001
    ticket, approval = paused(sandbox, "K-1001")
    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="Please cancel the refund, <b>it works</b> again."
    )
    client.force_login(approver)

    shown = card_outside_its_conversation(client.get("/staff/approvals/").content.decode(), approval)

    assert "The customer wrote after the agent asked" in shown
    assert "Please cancel the refund, &lt;b&gt;it works&lt;/b&gt; again." in shown
    assert "<b>it works" not in shown
    # The words that led to the request are not news: only what came after it.
    assert "Please refund my order K-1001" not in shown


def test_a_card_says_nothing_of_the_kind_when_the_customer_has_not_written_since(sandbox, client, approver):  # noqa: ANN001
    ticket, approval = paused(sandbox, "K-1002")
    # An internal note and the agent's words after the request are not the customer's.
    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.SYSTEM, body="Looked at the photos", is_public=False
    )
    client.force_login(approver)

    shown = card_outside_its_conversation(client.get("/staff/approvals/").content.decode(), approval)

    assert "The customer wrote after the agent asked" not in shown
    assert "Looked at the photos" not in shown
