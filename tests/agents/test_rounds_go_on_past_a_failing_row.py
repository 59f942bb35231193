"""The periodic rounds go on past a row whose work fails (never stuck, DESIGN.md invariant 14).

The reconciler, the expiry of staff approvals and the expiry of the customer's questions each walk
many rows. A row whose work failed in a way no code foresaw (a provider's answer of a new shape, a
row an operator edited by hand) failed the whole round, on every tick, before the rows after it were
reached: their refunds were never settled, their approvals never expired, their customers never
told. Now such a row is logged and left for the next round, and the others are done.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents import calls as call_services
from agents import refunds as refund_module
from agents.confirmation import confirmations_expire_due
from agents.models import CallStatus, ConfirmationDecision, Refund, RefundStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from payments.provider import ProviderUncertain
from tests.agents.test_confirmation import ask_for_refund, question
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


class UnforeseenError(Exception):
    """What no code of the round expected."""


def _refund_asked(sandbox, number: str, cents: int):  # noqa: ANN001, ANN202
    customer = make_customer()
    order_for(customer, number, 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund {number}")
    advance(ticket.pk, model=Refunds((number, cents)))
    return ticket


def test_the_reconciler_settles_the_other_refunds_when_one_cannot_be_reconciled(sandbox, monkeypatch, settings):  # noqa: ANN001
    settings.REFUND_PROVIDER_ATTEMPTS = 1
    settings.REFUND_RETRY_FIRST_WAIT_MS = settings.REFUND_RETRY_MAX_WAIT_MS = 5
    real_create = refund_module.provider().create_refund

    def answer_lost(**kwargs):  # noqa: ANN003, ANN202
        real_create(**kwargs)  # the provider pays; its answer never comes back
        raise ProviderUncertain("read timed out")

    monkeypatch.setattr(refund_module.provider(), "create_refund", answer_lost)
    first = _refund_asked(sandbox, "RR-1001", 2000)
    second = _refund_asked(sandbox, "RR-1002", 2500)
    poisoned, settled = (Refund.objects.get(ticket=t) for t in (first, second))
    assert poisoned.pk < settled.pk and {poisoned.status, settled.status} == {RefundStatus.UNCERTAIN}

    real_find = refund_module.ReconcileRound.find

    def find(self, refund):  # noqa: ANN001, ANN202
        if refund.pk == poisoned.pk:
            raise UnforeseenError("a provider answer of a shape no code knows")
        return real_find(self, refund)

    monkeypatch.setattr(refund_module.ReconcileRound, "find", find)
    counts = refund_module.reconcile_open_refunds()

    poisoned.refresh_from_db()
    settled.refresh_from_db()
    assert settled.status == RefundStatus.SUCCEEDED, f"the refund after the failing one is still {settled.status}"
    assert poisoned.status == RefundStatus.UNCERTAIN  # left for the next round, as it was
    assert counts == {RefundStatus.SUCCEEDED: 1, "errors": 1}


def test_the_other_approvals_expire_when_one_cannot_be_expired(sandbox, monkeypatch):  # noqa: ANN001
    first = _refund_asked(sandbox, "RA-1001", 30000)  # above the threshold: waits for staff
    second = _refund_asked(sandbox, "RA-1002", 30000)
    poisoned, expiring = (ApprovalRequest.objects.get(ticket=t) for t in (first, second))
    assert poisoned.pk < expiring.pk
    ApprovalRequest.objects.update(expires_at=timezone.now() - timedelta(minutes=1))
    real_expired = approval_services._expired

    def expired(approval):  # noqa: ANN001, ANN202
        if approval.pk == poisoned.pk:
            raise UnforeseenError("a row edited by hand")
        return real_expired(approval)

    monkeypatch.setattr(approval_services, "_expired", expired)
    counts = approval_services.approvals_expire_due()

    poisoned.refresh_from_db()
    expiring.refresh_from_db()
    assert expiring.status == ApprovalStatus.EXPIRED, f"the approval after the failing one is {expiring.status}"
    assert poisoned.status == ApprovalStatus.PENDING  # its transaction rolled back whole: next round
    assert ToolCall.objects.get(pk=poisoned.tool_call_id).approval_decision is None
    assert (counts["expired"], counts["errors"]) == (1, 1)


@pytest.mark.customer_confirms
@pytest.mark.usefixtures("quick_provider_retries")
def test_the_other_questions_expire_when_one_cannot_be_expired(sandbox, monkeypatch):  # noqa: ANN001
    _, _, first = ask_for_refund(sandbox, "RQ-1001")
    _, _, second = ask_for_refund(sandbox, "RQ-1002")
    poisoned, expiring = question(first), question(second)
    assert poisoned.pk < expiring.pk
    assert {poisoned.status, expiring.status} == {CallStatus.AWAITING_CONFIRMATION}
    ToolCall.objects.filter(pk__in=[poisoned.pk, expiring.pk]).update(
        confirmation_expires_at=timezone.now() - timedelta(minutes=1)
    )
    real_record = call_services.call_record_confirmation

    def record(*, call_id, decision):  # noqa: ANN001, ANN202
        if call_id == poisoned.pk:
            raise UnforeseenError("a row edited by hand")
        return real_record(call_id=call_id, decision=decision)

    monkeypatch.setattr(call_services, "call_record_confirmation", record)
    assert confirmations_expire_due() == 1

    poisoned.refresh_from_db()
    expiring.refresh_from_db()
    assert expiring.confirmation_decision == ConfirmationDecision.EXPIRED
    assert poisoned.confirmation_decision is None
