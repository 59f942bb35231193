"""The money path probed from outside (2026-12-05), kept as regression tests: each held on the code
as it was, and each guards something no other test does.

- The customer's Confirm answered from two tabs at the same instant (two clients, two threads, the
  real view): one answer is recorded, one refund at most is paid, and the other tab is told.
- The same refund asked for in two tickets whose agents decide it at the same instant: one of the
  two at most goes unreviewed.
- The threshold and the per-customer limit at their edge: a refund bringing the total exactly to the
  limit is not reviewed for it, one cent more is.
- An amount written as a decimal number (4999.0), which the tool's schema lets through, is refused.

Each test reads the payment sandbox's own records (a separate process, over HTTP).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection
from django.test import Client

from agents.models import CallStatus
from agents.runner import advance
from tests.agents.test_money_gates import THRESHOLD, Refunds, confirm, refund_calls
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def at_once(*work: Callable[[], object]) -> list[object]:
    """Run each in its own thread (its own database session), released together; their results."""
    released = threading.Barrier(len(work))
    results: list[object] = [None] * len(work)

    def run(n: int) -> None:
        released.wait()
        try:
            results[n] = work[n]()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.customer_confirms
@pytest.mark.parametrize("other", ["confirm", "cancel"])
def test_confirm_pressed_in_two_tabs_at_once_is_recorded_once_and_paid_once(sandbox, other):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "E-1001", 4999, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund E-1001")
    model = Refunds(("E-1001", 4999))
    advance(ticket.pk, model=model)
    (call,) = refund_calls(ticket)

    def press(what: str) -> Callable[[], tuple[str, int, dict]]:
        def post() -> tuple[str, int, dict]:
            tab = Client()
            tab.force_login(customer.user)
            answer = tab.post(
                f"/tickets/{ticket.pk}/confirmations/{call.pk}",
                {"answer": what, "digest": call.confirmation_digest},
                content_type="application/json",
            )
            return what, answer.status_code, answer.json()

        return post

    answers = at_once(press("confirm"), press(other))

    assert ticket.events.filter(kind="confirmation_decided").count() == 1
    stands = {what for what, status, _ in answers if status == 200}
    assert len(stands) == 1, answers  # the same answer twice is one; two different ones: the first stands
    refused = [body for _, status, body in answers if status != 200]
    assert all(body["code"] == "already_decided" for body in refused), answers
    advance(ticket.pk, model=model)
    advance(ticket.pk, model=model)
    assert [r["amount"] for r in paid(sandbox, order)] == ([4999] if stands == {"confirm"} else [])
    assert_money_invariants(sandbox)


@pytest.mark.customer_confirms
@pytest.mark.parametrize("cents", [15000, THRESHOLD + 1], ids=["under", "over"])
def test_the_same_refund_decided_in_two_tickets_at_once_is_reviewed_in_one_at_least(sandbox, cents):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "E-2001", 30000, sandbox)
    model = Refunds(("E-2001", cents))
    tickets = [
        ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund E-2001")[0] for _ in range(2)
    ]

    at_once(*(lambda ticket=ticket: advance(ticket.pk, model=model) for ticket in tickets))

    calls = [call for ticket in tickets for call in refund_calls(ticket)]
    assert len(calls) == 2
    unreviewed = [call for call in calls if not call.approval_required]
    assert len(unreviewed) == (1 if cents <= THRESHOLD else 0), [c.approval_reason for c in calls]
    for ticket in tickets:
        for call in refund_calls(ticket):
            if call.status == CallStatus.AWAITING_CONFIRMATION:
                assert confirm(ticket, call) == 200
        advance(ticket.pk, model=model)
    assert [r["amount"] for r in paid(sandbox, order)] == [c.arguments["amount_cents"] for c in unreviewed]


@pytest.mark.parametrize(("cents", "reviewed"), [(THRESHOLD, False), (THRESHOLD + 1, True)])
def test_a_refund_exactly_at_the_threshold_is_not_reviewed_for_it_one_cent_more_is(sandbox, cents, reviewed):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "E-3001", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund E-3001")
    advance(ticket.pk, model=Refunds(("E-3001", cents)))

    (call,) = refund_calls(ticket)
    assert call.approval_required is reviewed, call.approval_reason
    assert [r["amount"] for r in paid(sandbox, order)] == ([] if reviewed else [cents])


@pytest.mark.parametrize(("more", "reviewed"), [(5000, False), (5001, True)])
def test_the_customers_limit_counts_another_orders_refund_to_the_cent(sandbox, more, reviewed):  # noqa: ANN001
    """The per-customer limit (empty: the threshold) over two orders, two tickets: $150.00 paid on one,
    then exactly $50.00 more on the other is within it; $50.01 is past it."""
    customer = make_customer()
    first = order_for(customer, "E-4001", 50000, sandbox)
    second = order_for(customer, "E-4002", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund E-4001")
    advance(ticket.pk, model=Refunds(("E-4001", THRESHOLD - 5000)))
    assert [r["amount"] for r in paid(sandbox, first)] == [THRESHOLD - 5000]
    other, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund E-4002")
    advance(other.pk, model=Refunds(("E-4002", more)))

    (call,) = refund_calls(other)
    assert call.approval_required is reviewed, call.approval_reason
    assert (reviewed and "refunds to one customer above $200.00 in 30 days" in call.approval_reason) or not reviewed
    assert [r["amount"] for r in paid(sandbox, second)] == ([] if reviewed else [more])


@pytest.mark.parametrize("amount", [4999.0, 1e3])
def test_an_amount_written_as_a_decimal_number_is_refused_not_paid(sandbox, amount):  # noqa: ANN001
    """4999.0 passes the tool's schema (JSON Schema counts it an integer); the rules refuse it before
    anything is recorded, as the count of refunds still to happen would read it as nothing."""
    customer = make_customer()
    order = order_for(customer, "E-5001", 4999, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund E-5001")
    advance(ticket.pk, model=Refunds(("E-5001", amount)))

    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.FAILED, (call.status, call.error)
    assert "positive whole number of cents" in call.error
    assert paid(sandbox, order) == []
