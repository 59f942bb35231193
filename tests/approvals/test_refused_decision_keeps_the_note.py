"""A decision refused with the request still open (sent from a page read before the customer wrote
again) shows the card again with the note the approver typed in the form they sent, not an empty box:
they read what is new and send it again, without typing their note a second time."""

from __future__ import annotations

import html
import re

import pytest

from approvals.models import ApprovalStatus
from tests.approvals.test_approve_after_the_customer_wrote import approve_form
from tests.approvals.test_dashboard import paused
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

NOTE = 'Photos checked <b>"cracked"</b> & ok'


def note_in_form(page: str, approval_id: int, form_class: str) -> str | None:
    """The value of the note box of one of the card's forms (None: an empty box)."""
    card = page[page.index(f'id="approval-{approval_id}"') :]
    form = card[card.index(f'class="{form_class}"') :]
    form = form[: form.index("</form>")]
    box = re.search(r'<input type="text"[^>]*name="note"[^>]*>', form)[0]
    value = re.search(r'value="([^"]*)"', box)
    return html.unescape(value[1]) if value else None


def test_an_approval_refused_as_stale_shows_the_card_again_with_the_typed_note(sandbox, client, approver):
    ticket, approval = paused(sandbox, "N-1001")
    client.force_login(approver)
    read_before = approve_form(client.get("/staff/approvals/").content.decode(), approval.pk)
    ticket_services.message_post(ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="Is it done yet?")

    refused = client.post(f"/staff/approvals/{approval.pk}/decide/", {**read_before, "note": NOTE})

    assert refused.status_code == 409
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    page = refused.content.decode()
    assert note_in_form(page, approval.pk, "approve") == NOTE, "the typed note is gone from the card"
    assert note_in_form(page, approval.pk, "reject") is None  # only in the form that was sent
    assert "<b>" not in page.split('class="approve"', 1)[1].split("</form>", 1)[0]  # shown as text
