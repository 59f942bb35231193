"""A refund failed before the provider ever showed it still counts for the approval rules.

The reconciler fails a refund the provider has no record of past the bound, and asks about it again
for REFUND_RECHECK_FAILED_HOURS: a request still on its way may land, and is then recorded paid.
Until then it may still happen, so it counts like an uncertain one: asked again in its ticket it is
a second refund on the order, and in another ticket it counts toward the order's threshold. When
the first request lands, one customer request has not been paid twice unreviewed.
"""

from __future__ import annotations

import json

import pytest

from agents import refunds as refund_module
from agents.llm import ModelResponse, ToolCallRequest
from agents.models import CallStatus, Refund, RefundStatus, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from payments.provider import ProviderUncertain
from tests.agents.test_money_gates import Refunds, only_the_order_threshold, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _one_provider_attempt(quick_provider_retries):  # noqa: ANN001
    quick_provider_retries.REFUND_PROVIDER_ATTEMPTS = 1


class RefundsWhenAsked(Refunds):
    """Asks for the refunds whenever the customer spoke last; answers in words after a tool result."""

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        if messages[-1]["role"] == "tool":
            return ModelResponse(text="Done.")
        return ModelResponse(
            text="",
            tool_calls=[
                ToolCallRequest(f"c{len(messages)}-{n}", name, json.dumps(arguments))
                for n, (name, arguments) in enumerate(self.wanted, start=1)
            ],
        )


def _first_request_stays_on_its_way(monkeypatch) -> dict:  # noqa: ANN001
    """The first refund request leaves, but no answer comes back and the provider has no record of it
    yet (it is still on its way). Returns a holder whose ``land()`` delivers it later."""
    real_create = refund_module.provider().create_refund
    held: dict = {}

    def on_its_way(**kwargs):  # noqa: ANN003, ANN202
        if "kwargs" not in held:
            held["kwargs"] = kwargs
            raise ProviderUncertain("read timed out")
        return real_create(**kwargs)

    monkeypatch.setattr(refund_module.provider(), "create_refund", on_its_way)
    held["land"] = lambda: real_create(**held["kwargs"])
    return held


def _reconciler_gives_up_on_it() -> Refund:
    refund = Refund.objects.get()
    assert refund.status == RefundStatus.UNCERTAIN
    # Past the bound, no worker holds the ticket, the provider has no record under the key: failed.
    assert refund_module.refund_reconcile(refund=refund, older_than_seconds=0) == RefundStatus.FAILED
    refund.refresh_from_db()
    assert refund.provider_refund_id is None  # failed unseen: rechecked for hours, may still land
    return refund


def test_a_refund_failed_unseen_still_counts_as_a_first_refund_when_asked_again_in_the_ticket(sandbox, monkeypatch):  # noqa: ANN001
    customer = make_customer()
    person = make_staff("unseen-person", can_decide=False)
    order = order_for(customer, "V-1001", 30000, sandbox)  # two items; the customer wants one back
    held = _first_request_stays_on_its_way(monkeypatch)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $150 on V-1001")
    model = RefundsWhenAsked(("V-1001", 15000))

    advance(ticket.pk, model=model)  # no answer from the provider: uncertain, the ticket goes to a person
    _reconciler_gives_up_on_it()

    # The person hands it back (staff note: check before refunding again); the customer asks again.
    ticket_services.ticket_hand_back(ticket=ticket, user=person)
    ticket_services.message_post(ticket=ticket, author_kind="customer", body="So is my refund coming?")
    advance(ticket.pk, model=model)

    held["land"]()  # the first request lands after all
    refund_module.reconcile_open_refunds()

    first, again = refund_calls(ticket)
    assert first.status == CallStatus.UNCERTAIN
    amounts = sorted(r["amount"] for r in paid(sandbox, order))
    ledger = sorted(Refund.objects.filter(status=RefundStatus.SUCCEEDED).values_list("amount_cents", flat=True))
    # The first refund may still be paid (the reconciler keeps asking about it): a second refund on
    # this order in this ticket needs a staff approval.
    assert again.approval_required and again.status == CallStatus.AWAITING_APPROVAL, (
        f"the same refund was asked again and run unreviewed ({again.status}); provider paid {amounts}, "
        f"ledger succeeded {ledger}"
    )
    assert amounts == [15000], "one request paid twice"


def test_a_refund_failed_unseen_counts_toward_the_orders_threshold_in_another_ticket(sandbox, monkeypatch):  # noqa: ANN001
    only_the_order_threshold()
    customer = make_customer()
    order = order_for(customer, "V-2001", 30000, sandbox)
    held = _first_request_stays_on_its_way(monkeypatch)
    first_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $150 on V-2001")
    advance(first_ticket.pk, model=Refunds(("V-2001", 15000)))
    _reconciler_gives_up_on_it()

    second_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Again", body="Refund $150 on V-2001")
    advance(second_ticket.pk, model=Refunds(("V-2001", 15000)))
    held["land"]()
    refund_module.reconcile_open_refunds()

    approved = set(
        ApprovalRequest.objects.filter(status=ApprovalStatus.APPROVED).values_list("tool_call_id", flat=True)
    )
    unreviewed = sum(
        r.amount_cents for r in Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED)
        if r.tool_call_id not in approved
    )  # fmt: skip
    (second,) = ToolCall.objects.filter(ticket=second_ticket, name="issue_refund")
    assert second.approval_required, "the second $150 was paid with $150 possibly paid already"
    assert unreviewed <= 20000, f"{unreviewed} cents paid on one order unreviewed (threshold 20000)"
