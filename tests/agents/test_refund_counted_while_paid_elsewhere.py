"""A refund paid in another ticket of the customer while a new refund is judged counts toward the
customer's limit.

Whether a refund needs a staff approval counts the customer's refunds and the refund calls that may
still happen (``agents.refunds.refund_commitments``). A call leaves the second count as its refund
row enters the first, in the one commit of the worker that pays it. Read as two statements, a
commit that fell between them (the customer pressed Confirm in their other ticket, and its worker
sent the refund) was in neither: the new refund was judged as if the other had never been asked
for, and both were paid over the per-customer limit unreviewed. (Two orders: the order's lock does
not order the two workers, and sending a refund takes no lock of the customer.)
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from agents import refunds as refund_module
from agents.models import ApprovalPolicy, CallStatus, RefundStatus
from agents.runner import advance
from tests.agents.test_money_gates import Refunds, confirm, press_every_confirm, refund_calls, unreviewed_total
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]

LIMIT = 50000  # $500.00 to one customer in the window; each order's $300.00 is under the order threshold


@pytest.mark.customer_confirms
def test_a_refund_sent_in_another_ticket_while_a_new_one_is_judged_counts_toward_the_customer_limit(
    sandbox, monkeypatch
):  # noqa: ANN001
    policy = ApprovalPolicy.current()
    policy.refund_threshold_cents, policy.customer_limit_cents = 40000, LIMIT
    policy.save()
    customer = make_customer()
    first_order = order_for(customer, "W-1001", 30000, sandbox)
    other_order = order_for(customer, "W-1002", 30000, sandbox)
    other_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund W-1002")
    other_model = Refunds(("W-1002", 30000))
    advance(other_ticket.pk, model=other_model)
    (waiting,) = refund_calls(other_ticket)
    assert waiting.status == CallStatus.AWAITING_CONFIRMATION and not waiting.approval_required
    assert confirm(other_ticket, waiting) == 200

    # The other ticket's worker takes up the Confirm and goes to pay; it waits at the refund's door
    # until this ticket's refund is being judged, then commits its refund and sends it.
    at_the_door_now, go, sent = threading.Event(), threading.Event(), threading.Event()
    may_execute, create = refund_module.may_execute, refund_module.provider().create_refund

    def at_the_door(call):  # noqa: ANN001, ANN202
        if call.pk == waiting.pk:
            at_the_door_now.set()
            go.wait(60)
        return may_execute(call)

    def sending(**kwargs):  # noqa: ANN003, ANN202
        sent.set()  # the refund row is committed: the provider may now act under its key
        return create(**kwargs)

    monkeypatch.setattr(refund_module, "may_execute", at_the_door)
    monkeypatch.setattr(refund_module.provider(), "create_refund", sending)

    def other_worker() -> None:
        try:
            advance(other_ticket.pk, model=other_model)
        finally:
            connection.close()

    worker = threading.Thread(target=other_worker)
    worker.start()
    assert at_the_door_now.wait(60), "the other ticket's worker did not take up the Confirm"

    def while_the_customers_refunds_are_read(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        result = execute(sql, params, many, context)
        if '"agents_refund"."created_at" >=' in sql and not go.is_set():
            go.set()
            assert sent.wait(60), "the other ticket's worker did not send its refund"
        return result

    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund W-1001")
    with connection.execute_wrapper(while_the_customers_refunds_are_read):
        advance(ticket.pk, model=Refunds(("W-1001", 30000)))
    go.set()
    worker.join(60)
    monkeypatch.undo()

    assert sent.is_set()
    assert [r["amount"] for r in paid(sandbox, other_order)] == [30000]
    waiting.refresh_from_db()
    assert waiting.refund.status == RefundStatus.SUCCEEDED
    (asked,) = refund_calls(ticket)
    assert asked.approval_required, asked.status
    assert "refunds to one customer above $500.00" in asked.approval_reason
    press_every_confirm(ticket, Refunds(("W-1001", 30000)))
    assert paid(sandbox, first_order) == []
    assert unreviewed_total(first_order) + unreviewed_total(other_order) <= LIMIT
    assert_money_invariants(sandbox, needed_approval={"W-1001"})


def test_two_tickets_of_one_customer_judged_at_once_are_not_both_paid_over_the_customer_limit(sandbox):  # noqa: ANN001
    """Two workers write, at the same moment, the steps that ask for a refund on each of the
    customer's two orders: each decision sees the other's call (the customer's row serialises them)."""
    policy = ApprovalPolicy.current()
    policy.refund_threshold_cents, policy.customer_limit_cents = 40000, LIMIT
    policy.save()
    customer = make_customer()
    orders = [order_for(customer, number, 30000, sandbox) for number in ("W-2001", "W-2002")]
    tickets = [
        ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund {order.number}")[0]
        for order in orders
    ]
    both_answered = threading.Barrier(2)

    class AtTheSameMoment(Refunds):
        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
            response = super().complete(messages=messages, tools=tools, on_token=on_token)
            if response.tool_calls:
                both_answered.wait(60)  # both steps are stored (and judged) together
            return response

    def worker(ticket, order) -> None:  # noqa: ANN001
        try:
            advance(ticket.pk, model=AtTheSameMoment((order.number, 30000)))
        finally:
            connection.close()

    workers = [threading.Thread(target=worker, args=pair) for pair in zip(tickets, orders, strict=True)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(60)

    asked = [call for ticket in tickets for call in refund_calls(ticket)]
    assert sorted(call.approval_required for call in asked) == [False, True]
    assert sum(len(paid(sandbox, order)) for order in orders) == 1
    assert sum(unreviewed_total(order) for order in orders) <= LIMIT
    assert_money_invariants(sandbox)
