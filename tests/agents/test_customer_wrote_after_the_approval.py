"""A customer who writes after staff approved a refund, before a worker carried it out, is not paid
on the approval alone: the refund is stopped, the chat says nothing was done, and the agent answers
the message (asking again if the refund still applies; asked again, it is reviewed again).

With the customer's Confirm turned off (``REFUND_CUSTOMER_CONFIRMATION=0`` or the policy's
``customer_confirms_refunds``) nothing read the customer's messages between staff's decision and the
payment: "please cancel the refund", written in that moment (workers busy or down), was answered
after the refund was paid. The Approve of a card read before the message is refused (409); one read
before the customer wrote was not."""

from __future__ import annotations

import pytest
from django.test import Client

from agents import faults
from agents.models import NOT_RUN, CallStatus, Refund, RunStatus, ToolCall
from agents.runner import advance
from approvals import services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.conftest import WorkerDied, while_tool_runs
from tests.agents.test_money_gates import confirm
from tests.agents.test_refund_stopped_after_its_worker_died import _as_a_killed_worker_leaves_it
from tests.approvals.conftest import make_staff
from tests.approvals.test_approvals import provider_refunds, refund_ticket, replies
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketEvent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]

STOPPED = "The approved request was stopped before it was carried out, so nothing was done."
WROTE = "the customer wrote after it was approved, before it was carried out"


@pytest.fixture
def approver(db):  # noqa: ANN001, ANN201
    return make_staff("wrote-approver", can_decide=True)


def write(ticket, body: str) -> None:  # noqa: ANN001
    ticket_services.message_post(ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body=body)


def approved(sandbox, approver, number: str = "P-1001"):  # noqa: ANN001, ANN201
    """A refund above the threshold, paused for staff, approved; no worker has applied it yet."""
    ticket, order = refund_ticket(sandbox, number=number)
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    approval = ApprovalRequest.objects.get(ticket=ticket)
    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    return ticket, order, approval


def chat(ticket) -> str:  # noqa: ANN001
    client = Client()
    client.force_login(ticket.customer.user)
    return client.get(f"/tickets/{ticket.pk}/").content.decode()


def test_a_cancel_written_after_the_approval_before_it_was_carried_out_pays_nothing(sandbox, approver):  # noqa: ANN001
    ticket, order, approval = approved(sandbox, approver)
    write(ticket, "Please cancel the refund, it works again.")

    advance(ticket.pk)  # the decision's doorbell (and the message's)
    advance(ticket.pk)

    assert provider_refunds(sandbox, order) == [], "paid on the approval after the customer asked to cancel"
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.FAILED
    assert call.error == f"{NOT_RUN}: {WROTE}"
    told = TicketEvent.objects.filter(ticket=ticket, kind="approved_call_withdrawn", is_public=True)
    assert [e.payload["call_id"] for e in told] == [call.pk]
    page = chat(ticket)
    assert page.index("finishing it now") < page.index(STOPPED)
    # The agent answered the message, once, in words that say nothing was refunded.
    answer = replies(ticket)[-1]
    assert "have not refunded anything" in answer and "P-1001" in answer, answer
    assert "already" not in answer and "help article" not in answer, answer
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True)
    # Staff's history says beside "Approved" that it was stopped, and why.
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED
    staff = Client()
    staff.force_login(approver)
    history = staff.get(f"/staff/approvals/history/?ticket={ticket.pk}").content.decode()
    assert f"then stopped before it ran ({WROTE}): nothing was done" in history


def test_a_message_that_lands_as_the_approved_refund_is_about_to_be_sent_stops_it(sandbox, approver, monkeypatch):  # noqa: ANN001
    """Written after the worker resumed the approved call, before the refund's intent committed: the
    check next to the payment sees it (the refund's transaction holds the ticket's row)."""
    ticket, order, _ = approved(sandbox, approver)
    while_tool_runs(monkeypatch, "issue_refund", lambda: write(ticket, "Stop, please cancel the refund."))

    advance(ticket.pk)
    monkeypatch.undo()
    advance(ticket.pk)

    assert provider_refunds(sandbox, order) == []
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert (call.status, call.error) == (CallStatus.FAILED, f"{NOT_RUN}: {WROTE}")
    assert not Refund.objects.filter(tool_call=call).exists()
    assert STOPPED in chat(ticket)
    assert "have not refunded anything" in replies(ticket)[-1]


def test_a_customer_who_still_wants_it_asks_again_and_it_is_reviewed_again(sandbox, approver):  # noqa: ANN001
    ticket, order, first = approved(sandbox, approver)
    write(ticket, "Thank you so much!")
    advance(ticket.pk)

    assert provider_refunds(sandbox, order) == []
    asked = replies(ticket)[-1]
    assert "still" in asked and "P-1001" in asked and "please refund order P-1001" in asked, asked

    write(ticket, "Please refund order P-1001.")
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL  # asked again: reviewed again
    assert provider_refunds(sandbox, order) == []
    second = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
    assert second.pk != first.pk and second.amount_cents == 64900
    services.approval_decide(approval_id=second.pk, user=approver, approve=True)
    advance(ticket.pk)
    assert [r["amount"] for r in provider_refunds(sandbox, order)] == [64900]


def test_a_message_written_before_the_decision_does_not_stop_the_approved_refund(sandbox, approver):  # noqa: ANN001
    """Written while the request waited (the card shows it): staff decided having read it."""
    ticket, order = refund_ticket(sandbox)
    advance(ticket.pk)
    write(ticket, "Any news on my refund?")
    advance(ticket.pk)  # told it waits for the decision
    approval = ApprovalRequest.objects.get(ticket=ticket)
    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk)

    assert [r["amount"] for r in provider_refunds(sandbox, order)] == [64900]
    assert not TicketEvent.objects.filter(ticket=ticket, kind="approved_call_withdrawn").exists()


@pytest.mark.customer_confirms
def test_with_the_customers_confirm_a_message_before_their_confirm_does_not_stop_it(sandbox, approver):  # noqa: ANN001
    """The customer's Confirm comes after the approval: it is their last word on the refund."""
    ticket, order, _ = approved(sandbox, approver)
    write(ticket, "Great, thanks!")
    advance(ticket.pk)  # the approval applied: the customer is asked to confirm
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_CONFIRMATION
    assert confirm(ticket, call) == 200
    advance(ticket.pk)

    assert [r["amount"] for r in provider_refunds(sandbox, order)] == [64900]


def test_a_message_written_after_the_worker_carrying_the_approved_refund_died_before_sending_it_stops_it(
    sandbox, approver, monkeypatch
):  # noqa: ANN001
    """The worker that applied the approval died before the refund's intent committed; the customer
    writes before another worker takes the ticket over: recovery runs the call again, and the refund,
    never sent, is not sent on the approval."""
    ticket, order, _ = approved(sandbox, approver)

    def dies():  # noqa: ANN202
        raise WorkerDied()

    while_tool_runs(monkeypatch, "issue_refund", dies)
    with pytest.raises(WorkerDied):
        advance(ticket.pk)
    monkeypatch.undo()
    _as_a_killed_worker_leaves_it(ticket.pk)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.STARTED and not Refund.objects.filter(tool_call=call).exists()

    write(ticket, "Please cancel the refund, it works again.")
    advance(ticket.pk)  # takes the ticket over from the dead worker: recovery runs the call again

    assert provider_refunds(sandbox, order) == []
    call.refresh_from_db()
    assert (call.status, call.error) == (CallStatus.FAILED, f"{NOT_RUN}: {WROTE}")
    assert STOPPED in chat(ticket)
    assert "have not refunded anything" in replies(ticket)[-1]


def test_a_message_written_after_the_worker_died_having_sent_the_approved_refund_does_not_pay_it_twice(
    sandbox, approver, monkeypatch
):  # noqa: ANN001
    """The provider paid it and the worker died before recording it: it may not be stopped (it
    happened); recovery records it under its key, paid once, and the customer is told it was issued."""
    ticket, order, _ = approved(sandbox, approver)
    hit = faults.hit

    def dies_once_paid(point: str) -> None:
        if point == "after_provider_refund":
            raise WorkerDied()
        hit(point)

    monkeypatch.setattr(faults, "hit", dies_once_paid)
    with pytest.raises(WorkerDied):
        advance(ticket.pk)
    monkeypatch.setattr(faults, "hit", hit)
    _as_a_killed_worker_leaves_it(ticket.pk)
    write(ticket, "Please cancel the refund, it works again.")
    advance(ticket.pk)
    advance(ticket.pk)

    assert [r["amount"] for r in provider_refunds(sandbox, order)] == [64900]
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status == CallStatus.SUCCEEDED
    assert not TicketEvent.objects.filter(ticket=ticket, kind="approved_call_withdrawn").exists()
    assert "already" in replies(ticket)[-1], replies(ticket)


@pytest.mark.workers
@pytest.mark.timeout(300)
def test_with_real_workers_killed_a_cancel_written_before_one_comes_back_pays_nothing(sandbox, cluster, approver):  # noqa: ANN001
    """End to end over HTTP: the worker that paused the refund is killed (SIGKILL); staff approve and
    the customer writes while no worker runs; the worker started next applies the decision."""
    import json
    import signal

    from tests.approvals.test_with_workers import decide_over_http
    from tests.workers import wait_until

    worker = cluster.worker()
    ticket, order = refund_ticket(sandbox, number="P-1101")
    wait_until(
        lambda: ApprovalRequest.objects.filter(ticket=ticket).exists(), timeout=60, what="the pause", cluster=cluster
    )
    worker.signal(signal.SIGKILL)
    worker.wait_dead(30)

    approval = ApprovalRequest.objects.get(ticket=ticket)
    decide_over_http(approver, approval, "approve")
    customer = Client()
    customer.force_login(ticket.customer.user)
    sent = customer.post(
        f"/tickets/{ticket.pk}/messages",
        data=json.dumps({"client_msg_id": "cancel-1", "body": "Please cancel the refund, it works again."}),
        content_type="application/json",
    )
    assert sent.status_code in (200, 201), sent.content

    cancel = Message.objects.get(ticket=ticket, client_msg_id="cancel-1")
    answered = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True, pk__gt=cancel.pk)

    cluster.worker()
    wait_until(answered.exists, timeout=90, what="the answer to the message", cluster=cluster)

    assert provider_refunds(sandbox, order) == [], "paid on the approval after the customer asked to cancel"
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert (call.status, call.error) == (CallStatus.FAILED, f"{NOT_RUN}: {WROTE}")
    assert replies(ticket) == [answered.get().body]
    assert "have not refunded anything" in answered.get().body
    assert STOPPED in chat(ticket)
