"""An open dashboard hears a colleague write on a ticket whose request it shows.

The card of a pending request quotes the ticket's conversation, internal notes too: a note ("do not
refund: the parcel came back empty") is how the team tells the person deciding to hold on, and an
approval sent from a card that did not show it is refused. The customer writing rang the open
dashboards; a colleague's note or reply rang none, so the card showed it only after the socket's
look at the ledger after a quiet spell (or a reload), and the person deciding, pressing Approve on
the card as it was, was refused for a note the live page had not shown them.
"""

from __future__ import annotations

import uuid

import pytest

from tests.approvals.test_dashboard import heard_after, paused
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

NOTE = "Do not refund: the parcel came back empty."


@pytest.mark.parametrize("public", [False, True], ids=["internal note", "reply to the customer"])
def test_a_colleague_writing_on_a_ticket_with_a_pending_request_rings_the_open_dashboard(
    sandbox, client, approver, monkeypatch, public
):
    # Only a ring reaches the page: the socket's own look after a quiet spell would come too late.
    monkeypatch.setattr("support.websocket.QUIET_CHECK_SECONDS", 3600.0, raising=False)
    ticket, approval = paused(sandbox, "N-3001")
    colleague = make_support_staff("li")
    write = ticket_services.staff_reply if public else ticket_services.staff_note

    heard = heard_after(
        approver, lambda: write(ticket=ticket.pk, user=colleague, body=NOTE, client_msg_id=uuid.uuid4().hex)
    )

    assert heard[0] == {"type": "ready"}
    assert len(heard) == 2 and heard[1]["type"] == "changed" and heard[1]["approval_id"] == approval.pk, (
        f"a colleague's {'reply' if public else 'note'} on ticket #{ticket.pk} never rang the open dashboard, "
        f"whose card quotes the conversation: it heard {heard}"
    )
    client.force_login(approver)
    pending = client.get("/staff/approvals/pending/").content.decode()  # what the rung page reads
    if public:  # the reply took the ticket: the card says the request was withdrawn
        assert f'<div class="person-took" hidden data-ids="{approval.pk}">' in pending
    else:
        assert NOTE in pending


def test_a_note_on_a_ticket_without_a_pending_request_rings_no_dashboard(sandbox, approver, monkeypatch):
    monkeypatch.setattr("support.websocket.QUIET_CHECK_SECONDS", 3600.0, raising=False)
    ticket, approval = paused(sandbox, "N-3002")
    approval.__class__.objects.filter(pk=approval.pk).update(status="rejected")
    colleague = make_support_staff("li")

    heard = heard_after(
        approver,
        lambda: ticket_services.staff_note(ticket=ticket.pk, user=colleague, body=NOTE, client_msg_id=uuid.uuid4().hex),
    )

    assert heard == [{"type": "ready"}]
