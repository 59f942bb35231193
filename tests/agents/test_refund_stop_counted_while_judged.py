"""A refund a person stops in another ticket while a new refund on the order is judged still makes
the new one wait for a staff approval.

Whether a refund needs an approval asks two things of the ledger: did a person stop (or staff
reject) a refund on this order before (``agents.refunds._stopped_before``), and is another refund
on it done or still to happen (``refund_commitments``). A refund waiting in another ticket leaves
the second as its stop enters the first: the worker that ends that run for the person closes the
call and records why in one commit. Read stops first, then commitments, a take-over whose run end
fell between the two reads was in neither: the new refund was judged a first refund on an order
nobody had stopped, and paid unreviewed.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from agents.models import CallStatus
from agents.runner import advance
from tests.agents.test_money_gates import Refunds, only_the_order_threshold, press_every_confirm, refund_calls
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.customer_confirms
@pytest.mark.parametrize("stop", ["take_over", "resolve"])
def test_a_refund_a_person_stops_while_another_is_judged_still_needs_an_approval(sandbox, person, stop):  # noqa: ANN001
    only_the_order_threshold()
    customer = make_customer()
    order = order_for(customer, "S-1701", 10000, sandbox)
    other_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund S-1701")
    other_model = Refunds(("S-1701", 5000))
    advance(other_ticket.pk, model=other_model)
    (waiting,) = refund_calls(other_ticket)
    assert waiting.status == CallStatus.AWAITING_CONFIRMATION and not waiting.approval_required
    # A person stops it; its worker has not ended the run yet (the doorbell is on its way).
    if stop == "take_over":
        ticket_services.ticket_take_over(ticket=other_ticket, user=person)
    else:
        ticket_services.ticket_resolve(ticket=other_ticket, user=person)

    def other_worker() -> None:
        try:
            advance(other_ticket.pk, model=other_model)  # the run ends for the person, its refund closed
        finally:
            connection.close()

    stopped = threading.Event()

    def once_the_stops_are_read(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        result = execute(sql, params, many, context)
        if '"agents_agentrun"."outcome"' in sql and not stopped.is_set():
            stopped.set()
            worker = threading.Thread(target=other_worker)
            worker.start()
            worker.join(20)
            assert not worker.is_alive(), "the other ticket's worker did not end its run"
        return result

    # The customer asks for the same refund in a new ticket, judged while that worker ends its run.
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund S-1701")
    model = Refunds(("S-1701", 5000))
    with connection.execute_wrapper(once_the_stops_are_read):
        advance(ticket.pk, model=model)

    assert stopped.is_set()
    waiting.refresh_from_db()
    assert waiting.status == CallStatus.CANCELLED and waiting.run.outcome == "a person took the ticket over"
    (asked,) = refund_calls(ticket)
    # Judged with the other refund still waiting (a second refund on the order), or as stopped.
    assert asked.approval_required, (asked.status, asked.approval_reason)
    assert "order S-1701" in asked.approval_reason
    press_every_confirm(ticket, model)
    assert paid(sandbox, order) == []
    assert_money_invariants(sandbox, needed_approval={"S-1701"})
