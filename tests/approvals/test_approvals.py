"""Approvals in-process: policy, pause, decisions, guardrails after the wait, expiry by moving time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from agents.models import AgentRun, CallStatus, Refund, RefundStatus, RunStatus, ToolCall
from agents.runner import advance
from approvals import services
from approvals.models import ApprovalRequest, ApprovalStatus, ToolApprovalRule
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def refund_ticket(sandbox, *, total_cents: int = 64900, flagged: bool = False, number: str = "P-1001"):  # noqa: ANN001
    customer = make_customer(flagged=flagged)
    order = make_order(customer, total_cents=total_cents, number=number)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body=f"Please refund my order {number}, it stopped working"
    )
    return ticket, order


def provider_refunds(sandbox, order) -> list[dict]:  # noqa: ANN001
    return [r for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference]


def replies(ticket) -> list[str]:  # noqa: ANN001
    return list(
        Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, is_public=True).values_list(
            "body", flat=True
        )
    )


def test_a_refund_above_the_threshold_pauses_with_rows_only(sandbox):
    ticket, order = refund_ticket(sandbox)

    outcome = advance(ticket.pk)

    assert outcome.state == RunStatus.WAITING_APPROVAL
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_APPROVAL
    approval = ApprovalRequest.objects.get(tool_call=call)
    assert approval.status == ApprovalStatus.PENDING
    assert approval.arguments == call.arguments and approval.amount_cents == 64900
    assert approval.evidence["order_number"] == order.number and "above $200.00" in approval.reason
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.PENDING_APPROVAL
    assert ticket.events.filter(kind="approval_requested", is_public=True).count() == 1
    assert provider_refunds(sandbox, order) == []
    assert advance(ticket.pk).state == "idle"  # nothing to do until someone decides


def test_an_approved_refund_runs_under_its_original_key_once(sandbox, approver):
    ticket, order = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)

    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk)
    advance(ticket.pk)

    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    refund = Refund.objects.get(tool_call=call)
    assert call.status == CallStatus.SUCCEEDED
    assert refund.idempotency_key == call.idempotency_key and refund.status == RefundStatus.SUCCEEDED
    assert [r["id"] for r in provider_refunds(sandbox, order)] == [refund.provider_refund_id]
    assert "I've refunded $649.00" in replies(ticket)[-1]
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WAITING_ON_CUSTOMER
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED


def test_a_rejected_refund_is_explained_to_the_customer_and_never_sent(sandbox, approver):
    ticket, order = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)

    services.approval_decide(approval_id=approval.pk, user=approver, approve=False, note="outside the 30-day window")
    advance(ticket.pk)

    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status == CallStatus.REJECTED
    assert provider_refunds(sandbox, order) == []
    assert "could not approve it (outside the 30-day window)" in replies(ticket)[-1]


def test_rejecting_without_a_reason_is_refused(sandbox, approver):
    ticket, _ = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)

    with pytest.raises(ValidationError, match="say why"):
        services.approval_decide(approval_id=approval.pk, user=approver, approve=False, note=" ")
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_every_refund_of_a_flagged_customer_needs_an_approval(sandbox):
    ticket, _ = refund_ticket(sandbox, total_cents=1500, flagged=True, number="P-1002")

    advance(ticket.pk)

    assert "every refund for this customer" in ApprovalRequest.objects.get(ticket=ticket).reason


def test_a_small_refund_for_an_ordinary_customer_needs_no_approval(sandbox):
    ticket, order = refund_ticket(sandbox, total_cents=1500, number="P-1003")

    advance(ticket.pk)

    assert not ApprovalRequest.objects.filter(ticket=ticket).exists()
    assert len(provider_refunds(sandbox, order)) == 1


def test_a_per_tool_rule_makes_every_call_of_that_tool_wait(sandbox):
    ToolApprovalRule.objects.create(tool_name="lookup_order", requires_approval=True)
    customer = make_customer()
    make_order(customer, number="P-1004")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is P-1004?")

    advance(ticket.pk)

    assert ApprovalRequest.objects.get(ticket=ticket).tool_name == "lookup_order"


def test_an_approval_does_not_cover_changed_arguments(sandbox, approver):
    ticket, order = refund_ticket(sandbox)
    advance(ticket.pk)
    first = ApprovalRequest.objects.get(ticket=ticket)
    services.approval_decide(approval_id=first.pk, user=approver, approve=True)
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    ToolCall.objects.filter(pk=call.pk).update(arguments={**call.arguments, "amount_cents": 64000})

    outcome = advance(ticket.pk)

    assert outcome.state == RunStatus.WAITING_APPROVAL
    assert provider_refunds(sandbox, order) == []
    kept, renewed = ApprovalRequest.objects.filter(ticket=ticket).order_by("requested_at", "id")
    assert renewed.status == ApprovalStatus.PENDING and renewed.arguments["amount_cents"] == 64000
    assert kept.pk == first.pk and kept.status == ApprovalStatus.APPROVED  # the earlier decision stays on record


def test_the_guardrails_are_checked_again_after_the_approval_wait(sandbox, approver):
    ticket, order = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    # While the request waited, another ticket refunded part of the same order.
    other, _ = ticket_services.ticket_open(customer=order.customer, subject="x", body="other")
    other_run = AgentRun.objects.create(ticket=other, status=RunStatus.COMPLETED)
    from agents.models import ModelStep

    step = ModelStep.objects.create(run=other_run, ticket=other, index=0, model_name="m", epoch=1, status="completed")
    other_call = ToolCall.objects.create(
        ticket=other, run=other_run, step=step, index=0, model_call_id="x", name="issue_refund",
        idempotency_key="manual-1", replay_policy="keyed", status="succeeded", epoch=1,
    )  # fmt: skip
    Refund.objects.create(
        ticket=other, order=order, tool_call=other_call, idempotency_key="manual-1", amount_cents=10000,
        currency="usd", status=RefundStatus.SUCCEEDED, provider_refund_id="re_manual",
    )  # fmt: skip

    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk)

    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.FAILED and "$549.00 left to refund" in call.error
    assert provider_refunds(sandbox, order) == []


def test_deciding_twice_changes_nothing_the_second_time(sandbox, approver):
    ticket, _ = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)

    with pytest.raises(services.ApprovalClosed, match="already approved by approver"):
        services.approval_decide(approval_id=approval.pk, user=approver, approve=False, note="changed my mind")

    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED and approval.note == ""
    assert ToolCall.objects.get(pk=approval.tool_call_id).approval_decision == "approved"


def test_users_without_the_permission_cannot_decide(sandbox, plain_staff):
    ticket, _ = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)

    with pytest.raises(PermissionDenied):
        services.approval_decide(approval_id=approval.pk, user=plain_staff, approve=True)
    with pytest.raises(PermissionDenied):
        services.approval_decide(approval_id=approval.pk, user=ticket.customer.user, approve=True)
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_an_expired_request_tells_the_customer_and_hands_the_ticket_to_a_person(sandbox, approver):
    ticket, order = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    later = timezone.now() + timedelta(hours=61)

    assert services.approvals_expire_due(now=later) == {"expired": 0, "reminded": 1}
    assert ticket.events.filter(kind="approval_reminder").count() == 1
    assert services.approvals_expire_due(now=later) == {"expired": 0, "reminded": 0}

    much_later = timezone.now() + timedelta(hours=73)
    assert services.approvals_expire_due(now=much_later)["expired"] == 1
    with pytest.raises(services.ApprovalClosed):
        services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk)

    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
    told = Message.objects.get(ticket=ticket, author_kind=AuthorKind.SYSTEM, is_public=True)
    assert "could not review your request in time" in told.body
    assert provider_refunds(sandbox, order) == []


def test_deciding_after_the_expiry_time_is_refused_even_before_the_sweep(sandbox, approver):
    ticket, _ = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)

    with pytest.raises(services.ApprovalClosed, match="expired"):
        services.approval_decide(
            approval_id=approval.pk, user=approver, approve=True, now=timezone.now() + timedelta(hours=80)
        )
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_the_same_decision_sent_again_by_the_same_person_returns_the_original(sandbox, approver):
    ticket, _ = refund_ticket(sandbox)
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    first = services.approval_decide(approval_id=approval.pk, user=approver, approve=True)

    again = services.approval_decide(approval_id=approval.pk, user=approver, approve=True)

    assert (again.pk, again.decided_at) == (first.pk, first.decided_at)
    assert ticket.events.filter(kind="approval_decided").count() == 1


def test_a_customer_writing_during_the_wait_is_told_once_and_answered_after_the_decision(sandbox, approver):
    ticket, order = refund_ticket(sandbox)
    advance(ticket.pk)
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Any news on my refund?")

    advance(ticket.pk)
    advance(ticket.pk)

    notes = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.SYSTEM, is_public=True)
    assert notes.count() == 1 and "still under review" in notes.get().body
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.WAITING_APPROVAL
    assert provider_refunds(sandbox, order) == []

    approval = ApprovalRequest.objects.get(ticket=ticket)
    services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(ticket.pk)

    runs = list(AgentRun.objects.filter(ticket=ticket).order_by("id"))
    assert [r.status for r in runs] == [RunStatus.COMPLETED, RunStatus.COMPLETED]  # the wait, then the question
    assert len(runs[1].input_message_ids) == 1
    assert len(replies(ticket)) == 2 and len(provider_refunds(sandbox, order)) == 1
