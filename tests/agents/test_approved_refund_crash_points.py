"""An approved refund, its worker killed or frozen at each point of the way from the approval to the reply.

A refund over the threshold waits for staff; staff approve; the worker carrying the approved refund
dies (SIGKILL, real Celery worker processes) at each fault point on its way: after the provider
answered but before our ledger recorded it, after the call's outcome was stored, while the reply
streams, after the reply's step was stored, before the lease was let go. Or it is frozen with the
request in flight while the reconciler runs every second and another worker may take the ticket.
Whatever happens: the provider paid once, the ledger says the same, the approval covers what was
paid, and the customer reads that they were refunded exactly once.
"""

from __future__ import annotations

import signal
import time

import pytest

from agents.models import CallStatus, Refund, RefundStatus, TicketLease, ToolCall
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_path import assert_money_invariants, at_rest, order_for, paid, public_words
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tests.workers import purge_broker, wait_until
from tickets import services as ticket_services
from tickets.models import TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("quick_provider_retries"),
    pytest.mark.workers,
]


def paused_for_approval(sandbox, cluster, label: str, number: str, **env: str):  # noqa: ANN001, ANN201
    """A ticket whose $300 refund waits for staff (a worker paused it, and is stopped unless ``keep``)."""
    customer = make_customer(f"crash-{label}")
    order = order_for(customer, number, 50000, sandbox)
    ask = f"Please refund $300 on order {number}"
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=ask)
    first = cluster.worker(**env)
    wait_until(
        lambda: ApprovalRequest.objects.filter(ticket=ticket, status=ApprovalStatus.PENDING).exists(),
        timeout=90,
        what="the refund to wait for its approval",
        cluster=cluster,
    )
    wait_until(lambda: at_rest(ticket), timeout=60, what="the paused ticket to come to rest", cluster=cluster)
    assert paid(sandbox, order) == []
    return ticket, order, first


def assert_paid_and_told_once(sandbox, ticket, order, number: str) -> None:  # noqa: ANN001
    assert len(paid(sandbox, order)) == 1, paid(sandbox, order)
    assert_money_invariants(sandbox, needed_approval={number})
    (refund,) = Refund.objects.filter(ticket=ticket)
    assert refund.status == RefundStatus.SUCCEEDED and refund.amount_cents == 30000, (refund.status, refund.error)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.SUCCEEDED, (call.status, call.error)
    ticket.refresh_from_db()
    words = public_words(ticket)
    assert ticket.status != TicketStatus.WITH_HUMAN, f"a refund paid once went to a person: {words}"
    told = [w for w in words if "refunded" in w.lower()]
    assert len(told) == 1, f"the customer was told {len(told)} times: {words}"
    assert not any("could not" in w.lower() for w in words), words


@pytest.mark.parametrize(
    "point", ["after_provider_refund", "after_keyed_effect", "mid_stream", "after_step_stored", "before_lease_release"]
)
def test_an_approved_refund_is_paid_and_told_once_whichever_moment_its_worker_dies(sandbox, cluster, point):  # noqa: ANN001
    approver = make_staff(f"crash-approver-{point}", can_decide=True)
    ticket, order, first = paused_for_approval(sandbox, cluster, point, "C-7001")
    first.stop()

    doomed = cluster.worker(faults=f"{point}:1")
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    doomed.wait_dead(timeout=120)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()

    cluster.worker()
    cluster.beat()
    wait_until(lambda: bool(paid(sandbox, order)), timeout=90, what="the approved refund", cluster=cluster)
    wait_until(lambda: at_rest(ticket), timeout=90, what="the ticket to come to rest", cluster=cluster)
    time.sleep(1.5)  # a sweep or two: nothing more may happen once it is at rest
    wait_until(lambda: at_rest(ticket), timeout=60, what="the ticket to stay at rest", cluster=cluster)
    assert_paid_and_told_once(sandbox, ticket, order, "C-7001")


# The reconciler settles refunds left open past a second, every second: it runs beside the workers.
EAGER_RECONCILER = {"REFUND_UNCERTAIN_AFTER_SECONDS": "1", "REFUND_RECONCILE_SECONDS": "1"}


@pytest.mark.parametrize("frozen_for", [0, 8])
def test_an_approved_refund_in_flight_beside_the_reconciler_and_a_second_worker_is_paid_and_told_once(
    sandbox,
    cluster,
    frozen_for,  # noqa: ANN001
):
    """The worker carrying the approved refund sends it; the provider takes seconds to answer. The
    reconciler runs every second with a one-second bound; with ``frozen_for``, the worker is frozen
    (SIGSTOP) mid-request past its lease, and another worker may take the ticket before it wakes."""
    approver = make_staff(f"race-approver-{frozen_for}", can_decide=True)
    ticket, order, _ = paused_for_approval(sandbox, cluster, f"race-{frozen_for}", "R-8001", **EAGER_RECONCILER)
    cluster.worker(**EAGER_RECONCILER)
    cluster.beat(**EAGER_RECONCILER)
    sandbox.fault("latency:6000")  # the provider pays, and answers six seconds later
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    wait_until(lambda: not sandbox.faults(), timeout=60, what="the refund to reach the provider", cluster=cluster)
    if frozen_for:
        # The worker that sent it (it holds the ticket's lease) is frozen with its request in flight,
        # past its lease; the other worker may take the ticket up meanwhile.
        owner = TicketLease.objects.get(ticket=ticket).owner
        (sender,) = [proc for proc in cluster.procs if f":{proc.pid}:" in owner]
        sender.signal(signal.SIGSTOP)
        time.sleep(frozen_for)
        sender.signal(signal.SIGCONT)
    wait_until(lambda: bool(paid(sandbox, order)), timeout=90, what="the approved refund", cluster=cluster)
    wait_until(
        lambda: Refund.objects.filter(ticket=ticket).exclude(status=RefundStatus.SUBMITTED).exists(),
        timeout=90,
        what="the refund to be settled",
        cluster=cluster,
    )
    wait_until(lambda: at_rest(ticket), timeout=90, what="the ticket to come to rest", cluster=cluster)
    time.sleep(3)  # a few reconciler rounds and sweeps: nothing more may happen once it is at rest
    assert_paid_and_told_once(sandbox, ticket, order, "R-8001")


def test_an_approval_whose_doorbell_is_lost_is_carried_out_once_by_the_sweeper(sandbox, cluster):  # noqa: ANN001
    """The process recording the decision dies after its commit, before the ticket's doorbell is
    rung (the broker lost it): beat's sweeper rings the ticket, and the refund is paid once."""
    approver = make_staff("lost-ring-approver", can_decide=True)
    ticket, order, first = paused_for_approval(sandbox, cluster, "lost-ring", "L-9001")
    first.stop()
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    purge_broker()  # the doorbell the decision rang is gone

    cluster.worker()
    cluster.beat()
    wait_until(lambda: bool(paid(sandbox, order)), timeout=90, what="the approved refund", cluster=cluster)
    wait_until(lambda: at_rest(ticket), timeout=90, what="the ticket to come to rest", cluster=cluster)
    time.sleep(1.5)  # a sweep or two: nothing more may happen once it is at rest
    assert_paid_and_told_once(sandbox, ticket, order, "L-9001")
