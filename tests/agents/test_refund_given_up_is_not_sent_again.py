"""A refund the reconciler gave up on (failed: the provider never saw it; the customer was told it
could not be completed; a person was handed the ticket with "check it with the payment provider
before refunding again") is never sent afterwards by the run that was carrying it, even when the
person hands the ticket back before any worker took it up. It was: the run, given back, ran the call
again under its key, and the provider paid it (with a store credit the person had sent meanwhile, twice
what was asked)."""

from __future__ import annotations

import pytest
from django.db import connection

from agents import refunds as refund_module
from agents.models import CallStatus, Refund, RefundStatus
from agents.runner import advance
from tests.agents.conftest import WorkerDied
from tests.agents.test_money_gates import Refunds, refund_calls
from tests.agents.test_money_path import assert_money_invariants, order_for, paid, public_words
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.parametrize("person_replies", [False, True])
def test_a_refund_the_reconciler_failed_and_escalated_is_not_sent_after_a_hand_back(  # noqa: ANN201
    sandbox, person, monkeypatch, person_replies  # noqa: ANN001
):  # fmt: skip
    customer = make_customer()
    order = order_for(customer, "GU-1001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order GU-1001")
    model = Refunds(("GU-1001", 5000))

    # The worker commits the refund as submitted, then dies before its request reaches the provider.
    from agents import faults

    real_hit = faults.hit

    def dies(**kwargs):  # noqa: ANN003, ANN202
        raise WorkerDied()

    def no_release(point: str) -> None:
        if point == "before_lease_release":
            raise WorkerDied()
        real_hit(point)

    with monkeypatch.context() as m:
        m.setattr(refund_module.provider(), "create_refund", dies)
        m.setattr(faults, "hit", no_release)
        with pytest.raises(WorkerDied):
            advance(ticket.pk, model=model)
    assert Refund.objects.get().status == RefundStatus.SUBMITTED and paid(sandbox, order) == []
    with connection.cursor() as cursor:  # as a killed worker leaves it: its session gone, the lease expired
        cursor.execute("SELECT pg_advisory_unlock_all()")
        cursor.execute(
            "UPDATE agents_ticketlease SET owner = 'dead-worker', expires_at = now() - interval '1 second' "
            "WHERE ticket_id = %s",
            [ticket.pk],
        )
    Refund.objects.update(updated_at=Refund.objects.get().created_at.replace(year=2000))

    # Beat's reconciler: the provider has no refund under the key, long past the bound, nobody holds the ticket.
    refund_module.reconcile_open_refunds()
    refund = Refund.objects.get()
    assert refund.status == RefundStatus.FAILED and refund.escalated_at is not None
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
    told = public_words(ticket)
    assert any("could not be completed" in w for w in told), told

    # The person looks, finds nothing at the provider, and gives the conversation back to the agent
    # (before any worker took up the ring of the hand-over).
    if person_replies:
        ticket_services.staff_reply(
            ticket=ticket.pk,
            user=person,
            client_msg_id="p1",
            body="I checked: the refund did not go through, so I have sent you a $50.00 store credit instead.",
        )
    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
    advance(ticket.pk, model=model)

    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.FAILED and call.error.startswith("Not sent again"), (call.status, call.error)
    assert paid(sandbox, order) == [], (
        "the refund the customer was told could not be completed (and staff were told to check before "
        f"refunding again) was sent afterwards: provider refunds {[r['amount'] for r in paid(sandbox, order)]}, "
        f"ledger {Refund.objects.get().status}, call {call.status}; customer read: {public_words(ticket)}"
    )
    assert_money_invariants(sandbox)
