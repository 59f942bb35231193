"""The other direction: a refund a person did NOT stop does not send every later request on the order
to staff forever.

README, "Refunds: the rules": a refund is reviewed when staff **rejected a refund before** on the
order, or a person **stopped one (took over, resolved or closed the ticket while it waited to be
paid)**. A refund the customer cancelled with the Cancel button, or one whose question expired
unanswered, was not waiting to be paid: "Cancel: the agent is told and says nothing was refunded";
"No answer within confirmation_minutes: nothing is paid and the customer is told ... If you still
want it, just ask again here." Asking again is then an ordinary first refund (under the threshold,
with no other refund on the order: the customer confirms, nobody approves).

Here the customer's Cancel (or the expiry) was recorded, and a person took the ticket (or resolved
it) before a worker applied it -- a ticket someone was looking at anyway. The pass that ends the
run closes the already-answered question with the words of a person's stop ("not run: a person took
the ticket over"), and from then on every refund on that order, in any ticket, waits for staff.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agents.confirmation import confirmations_expire_due
from agents.models import CallStatus, ToolCall
from agents.runner import advance
from tests.agents.test_money_gates import refund_calls
from tests.agents.test_money_path import order_for
from tests.agents.test_refund_a_person_stopped_matrix import AsksForTheRefund
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Ticket

WAITING = (CallStatus.AWAITING_CONFIRMATION, CallStatus.AWAITING_APPROVAL)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
    pytest.mark.customer_confirms,
]


def cancel(ticket: Ticket, call: ToolCall) -> int:
    """The customer presses Cancel on the question in the chat."""
    client = Client()
    client.force_login(ticket.customer.user)
    call.refresh_from_db()
    answer = client.post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}",
        json.dumps({"answer": "cancel", "digest": call.confirmation_digest}),
        content_type="application/json",
    )
    return answer.status_code


@pytest.mark.parametrize("answer", ["cancel", "expired"])
@pytest.mark.parametrize("then", ["take_over_and_hand_back", "resolve"])
def test_a_refund_the_customer_cancelled_does_not_send_the_next_request_to_staff(sandbox, person, then, answer):  # noqa: ANN001
    customer = make_customer()
    order_for(customer, "NP-3001", 5000, sandbox)  # $50.00: under every threshold
    words = "Please refund $50.00 on order NP-3001"
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=words)
    model = AsksForTheRefund("NP-3001", 5000)
    advance(ticket.pk, model=model)
    (first,) = refund_calls(ticket)
    assert first.status == CallStatus.AWAITING_CONFIRMATION

    # The customer says no (or lets the question expire); nothing can be paid on it any more.
    if answer == "cancel":
        assert cancel(ticket, first) == 200
    else:
        ToolCall.objects.filter(pk=first.pk).update(
            confirmation_expires_at=first.confirmation_expires_at.replace(year=2000)
        )
        assert confirmations_expire_due() == 1
    # A person was looking at the ticket and took it (or resolved it) before a worker took the ring.
    if then == "resolve":
        ticket_services.ticket_resolve(ticket=ticket.pk, user=person)
    else:
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    advance(ticket.pk, model=model)
    if then != "resolve":
        ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
        advance(ticket.pk, model=model)
    first.refresh_from_db()

    # A week later the customer changes their mind and asks, in a new ticket.
    again_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund after all", body=words)
    advance(again_ticket.pk, model=model)
    (again,) = refund_calls(again_ticket)
    assert not again.approval_required, (
        f"a refund the customer {'cancelled' if answer == 'cancel' else 'let expire'} (not stopped by a person: "
        "it no longer waited to be paid) sends every later refund on the order to staff: "
        f"{again.approval_reason!r}; first call {first.status}, decision {first.confirmation_decision}, "
        f"error {first.error!r}"
    )
    assert again.status == CallStatus.AWAITING_CONFIRMATION


@pytest.mark.workers
@pytest.mark.timeout(240)
def test_a_refund_the_customer_cancelled_during_a_deploy_does_not_send_the_next_request_to_staff_with_workers(
    sandbox,
    cluster,
    person,  # noqa: ANN001
):
    """The same, with real worker processes and the offline model: the customer presses Cancel while
    no worker is up (a deploy), a person looks at the ticket and takes it, the new worker ends the run."""
    from tests.workers import wait_until

    customer = make_customer()
    order_for(customer, "R-3101", 5000, sandbox)
    words = "Please refund $50.00 on order R-3101"
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=words)
    old = cluster.worker(REFUND_CUSTOMER_CONFIRMATION="1")
    wait_until(
        lambda: [c for c in refund_calls(ticket) if c.status == CallStatus.AWAITING_CONFIRMATION],
        timeout=60, what="the question to the customer", cluster=cluster,
    )  # fmt: skip
    old.stop()  # a deploy: no worker for a moment
    (first,) = refund_calls(ticket)
    assert cancel(ticket, first) == 200  # the customer says no
    ticket_services.ticket_take_over(ticket=ticket, user=person)  # a person was reading the chat
    cluster.worker(REFUND_CUSTOMER_CONFIRMATION="1")
    cluster.beat()
    wait_until(
        lambda: ToolCall.objects.get(pk=first.pk).status == CallStatus.CANCELLED,
        timeout=60, what="the run to end", cluster=cluster,
    )  # fmt: skip
    ticket_services.ticket_hand_back(ticket=ticket, user=person)

    again_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund after all", body=words)
    wait_until(
        lambda: [c for c in refund_calls(again_ticket) if c.status in WAITING],
        timeout=60, what="the second request", cluster=cluster,
    )  # fmt: skip
    first.refresh_from_db()
    (again,) = refund_calls(again_ticket)
    assert not again.approval_required, (
        "a refund the customer cancelled (not stopped by a person) sends every later refund on the order to "
        f"staff: {again.approval_reason!r}; first call {first.status}, decision {first.confirmation_decision}, "
        f"error {first.error!r}"
    )
