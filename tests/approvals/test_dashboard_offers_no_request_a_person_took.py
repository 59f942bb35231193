"""The dashboard offers no decision on a request whose ticket a person has taken (over, or closed),
and an open dashboard hears of it at once.

A person's take-over ends the agent's part: the agent withdraws its request when a worker next
passes on the ticket, and a decision meanwhile is refused ("A person has had ticket #N since the
agent asked"). Until then (workers busy, or the ring lost) the dashboard kept offering Approve and
Reject on the card, and nothing told an open dashboard: the person deciding read the card, typed a
reason, and was refused. The card now leaves the list when the person takes the ticket (a card being
worked on says it was withdrawn, as a request that ran out of time says it expired), and the
take-over rings the open dashboards.
"""

from __future__ import annotations

import pytest

from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.test_dashboard import heard_after, paused
from tests.staff.conftest import make_support_staff
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _offered(client, approval: ApprovalRequest) -> bool:  # noqa: ANN001
    return (
        f'action="/staff/approvals/{approval.pk}/decide/"' in client.get("/staff/approvals/pending/").content.decode()
    )


@pytest.mark.parametrize("taken", ["taken over", "closed", "taken over and handed back"])
def test_a_request_whose_ticket_a_person_took_is_not_offered_for_a_decision(sandbox, client, approver, taken):
    ticket, approval = paused(sandbox, "T-5001")
    client.force_login(approver)
    assert _offered(client, approval)
    maria = make_support_staff("maria")

    if taken == "closed":
        ticket_services.ticket_close(ticket=ticket.pk, user=maria)
    else:
        ticket_services.ticket_take_over(ticket=ticket.pk, user=maria)
    if taken == "taken over and handed back":  # before any worker passed: the take-over withdrew it all the same
        ticket_services.ticket_hand_back(ticket=ticket.pk, user=maria)

    pending = client.get("/staff/approvals/pending/").content.decode()
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING  # no worker has passed
    assert not _offered(client, approval), f"the dashboard still offers a decision on a ticket {taken} by a person"
    assert f'data-ids="{approval.pk}"' in pending  # a card of it still on a page says it was withdrawn
    answer = client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "reject", "note": "No."})
    assert answer.status_code == 409  # and a decision sent from an older page is still refused


def test_a_take_over_rings_the_open_dashboards(sandbox, approver, monkeypatch):
    monkeypatch.setattr("support.websocket.QUIET_CHECK_SECONDS", 3600.0, raising=False)
    ticket, approval = paused(sandbox, "T-5002")
    maria = make_support_staff("maria")

    heard = heard_after(approver, lambda: ticket_services.ticket_take_over(ticket=ticket.pk, user=maria))

    assert len(heard) == 2 and heard[1]["type"] == "changed" and heard[1]["approval_id"] == approval.pk, (
        f"a take-over of ticket #{ticket.pk} never rang the open dashboard showing its request: it heard {heard}"
    )
