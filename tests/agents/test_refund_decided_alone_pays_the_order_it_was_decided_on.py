"""A refund the agent decided on its own pays the order it was decided on, never another the same words name later.

The model asks for $50.00 on "k-200": the customer's only order of that number is K-200, in dollars, so it
is a first refund under every threshold, decided with no approval (and the customer's Confirm is off). It
is not paid at once: it waits behind a $300.00 refund of the same step that waits for staff, or its worker
(a real process) is killed right after its intent. Meanwhile the shop records the customer's order
"k-200", exactly as the model wrote it, which the number now names: an order in euros, and a refund on an
order in another currency than the approval policy's always waits for staff. Nobody judged a refund on
that order, so nothing is paid on it unreviewed; the model is told the number names another order now
(it asks the customer which).

Each test reads the payment sandbox's own records (a separate process, over HTTP).
"""

from __future__ import annotations

import signal

import pytest

from agents.models import AgentProfile, CallStatus
from agents.profiles import active_profile
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import Refunds, only_the_order_threshold, refund_calls
from tests.agents.test_money_path import at_rest, order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer, make_order
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import Customer, Order

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


class RefundOnLowerCaseK200(Refunds):
    """The model of the workers (the profile's ``model``, a class path): $50.00 on "k-200", then done."""

    def __init__(self) -> None:
        super().__init__(("k-200", 5000))


REFUSED = "now names order k-200, not order K-200 on which this refund was decided"


def an_order_in_euros_added_since(customer: Customer, sandbox) -> Order:  # noqa: ANN001
    """Recorded by the shop while the refund waited: "k-200", exactly as the model wrote it, in euros."""
    other = make_order(customer, number="k-200", total_cents=5000)
    other.currency = "eur"
    other.save(update_fields=["currency"])
    sandbox.seed_payment(other.payment_reference, other.total_cents, "eur")
    return other


def paid_unreviewed(sandbox, order: Order) -> list[int]:  # noqa: ANN001
    """The provider's refunds on the order whose call no approved request covers."""
    approved = set(
        ApprovalRequest.objects.filter(status=ApprovalStatus.APPROVED).values_list(
            "tool_call__idempotency_key", flat=True
        )
    )
    return [r["amount"] for r in paid(sandbox, order) if r["metadata"].get("idempotency_key") not in approved]


def test_a_refund_waiting_behind_a_card_is_not_paid_unreviewed_on_an_order_added_since(sandbox):  # noqa: ANN001
    only_the_order_threshold()
    customer = make_customer()
    big = order_for(customer, "B-700", 64900, sandbox)
    judged = order_for(customer, "K-200", 10000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refunds", body="Refund B-700 and k-200")
    model = Refunds(("B-700", 30000), ("k-200", 5000))
    advance(ticket.pk, model=model)
    first, second = refund_calls(ticket)
    assert first.status == CallStatus.AWAITING_APPROVAL
    assert (second.status, second.approval_required) == (CallStatus.STARTED, False)

    other = an_order_in_euros_added_since(customer, sandbox)
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(tool_call=first).pk,
        user=make_staff("k-200-approver", can_decide=True),
        approve=True,
    )
    advance(ticket.pk, model=model)

    assert [r["amount"] for r in paid(sandbox, big)] == [30000]  # the approved one is paid
    assert paid_unreviewed(sandbox, other) == [], "a refund on k-200, in euros, was paid unreviewed"
    assert paid(sandbox, judged) == []
    second.refresh_from_db()
    assert second.status == CallStatus.FAILED and REFUSED in second.error, (second.status, second.error)


@pytest.mark.workers
def test_a_refund_whose_worker_was_killed_after_its_intent_is_not_paid_unreviewed_on_an_order_added_since(
    sandbox, cluster
):  # noqa: ANN001
    AgentProfile.objects.filter(pk=active_profile().pk).update(model=f"{__name__}.{RefundOnLowerCaseK200.__name__}")
    customer = make_customer("kay-crash")
    judged = order_for(customer, "K-200", 10000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $50 on order k-200"
    )

    doomed = cluster.worker(faults="after_call_started")  # killed right after the refund's intent
    doomed.wait_dead(timeout=90)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()
    (call,) = refund_calls(ticket)
    assert (call.status, call.approval_required, call.arguments["order_number"]) == (CallStatus.STARTED, False, "k-200")

    other = an_order_in_euros_added_since(customer, sandbox)
    cluster.worker()
    cluster.beat()
    wait_until(lambda: at_rest(ticket), timeout=90, what="the ticket to come to rest", cluster=cluster)

    assert paid_unreviewed(sandbox, other) == [], "a refund on k-200, in euros, was paid unreviewed"
    assert paid(sandbox, judged) == []
    call.refresh_from_db()
    assert call.status == CallStatus.FAILED and REFUSED in call.error, (call.status, call.error)
