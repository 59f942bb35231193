"""A person takes the ticket between the commit of a refund's first try (its row ``submitted``) and its
send to the provider. The refund was decided (its approval, its confirmation, the take-over and the
customer's words checked with the ticket's row held) and committed before the take-over: to the
person it reads as a refund already at the provider, and it is paid once, under its key, its ledger
the provider's. Asked again after the hand-back, the same request is a second refund on the order:
reviewed, never paid twice unreviewed.
"""

from __future__ import annotations

import pytest

from agents import refunds as refund_module
from agents.models import CallStatus, Refund, RefundStatus
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from payments.provider import ProviderUnreachable
from tests.agents.test_money_gates import only_the_order_threshold, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.agents.test_refund_failed_unseen import RefundsWhenAsked
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _one_provider_attempt(quick_provider_retries):  # noqa: ANN001
    quick_provider_retries.REFUND_PROVIDER_ATTEMPTS = 1


def test_a_take_over_between_a_refunds_commit_and_its_first_send_pays_it_once(sandbox, monkeypatch, person):  # noqa: ANN001
    only_the_order_threshold()
    customer = make_customer()
    order = order_for(customer, "W-1001", 10000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $50 on W-1001")
    real_list = refund_module.provider().list_refunds
    reads: list[str] = []

    def list_refunds(**kwargs):  # noqa: ANN003, ANN202
        reads.append("read")
        if len(reads) == 1:  # before the intent's transaction: no answer, decided on the ledger alone
            raise ProviderUnreachable("connection reset")
        if len(reads) == 2:  # the first try's look-up, after the commit, before the send
            assert Refund.objects.get().status == RefundStatus.SUBMITTED
            ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
        return real_list(**kwargs)

    monkeypatch.setattr(refund_module.provider(), "list_refunds", list_refunds)
    model = RefundsWhenAsked(("W-1001", 5000))
    advance(ticket.pk, model=model)
    monkeypatch.setattr(refund_module.provider(), "list_refunds", real_list)
    assert len(reads) >= 2, "the take-over never landed between the commit and the send"

    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Refund $50 on W-1001")
    advance(ticket.pk, model=model)
    refund_module.reconcile_open_refunds()

    approved = set(
        ApprovalRequest.objects.filter(status=ApprovalStatus.APPROVED).values_list("tool_call_id", flat=True)
    )
    on_provider = sorted(r["amount"] for r in paid(sandbox, order))
    ledger = sorted(
        Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED).values_list("amount_cents", flat=True)
    )
    unreviewed = [
        r.amount_cents for r in Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED)
        if r.tool_call_id not in approved
    ]  # fmt: skip
    calls = [(c.status, c.approval_required, c.error[:80]) for c in refund_calls(ticket)]
    assert on_provider == ledger == [5000], (on_provider, ledger, calls)
    assert unreviewed == [5000], (unreviewed, calls)
    first, again = refund_calls(ticket)
    assert first.status == CallStatus.SUCCEEDED, calls
    assert again.approval_required and again.status == CallStatus.AWAITING_APPROVAL, calls
