"""A refund's amount is read, shown and sent as the payment provider counts it, in every currency.

Amounts are kept in the currency's minor unit as Stripe counts them, and Stripe does not always count
as the currency tables do: the Icelandic króna (or the Serbian dinar) has no minor unit in CLDR
(Babel), but two digits in Stripe's API (an amount of 100 is ISK 1), and Stripe takes whole krónur
only (multiples of 100). In a three-decimal currency (KWD, BHD, JOD, OMR, TND) Stripe takes amounts
whose last digit is 0 only.

Before: an ISK refund of 200000 (ISK 2,000 at Stripe) was shown to staff and to the customer as
"ISK 200,000"; a refund of KWD 6.175 or of ISK 1,500.50 was put to staff, approved, and sent to the
provider, which refuses it (and the sandbox, unlike Stripe, paid it).
"""

from __future__ import annotations

import json

import pytest

from agents.models import CallStatus, ToolCall
from agents.offline_model import OfflineDeterministicModel
from agents.runner import advance
from approvals import selectors as approval_selectors
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.conftest import rung_again_and_again
from tests.agents.test_money_path import assert_money_invariants, paid
from tests.agents.test_refunds import ScriptedRefund
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tests.payments.test_provider import AUTH, http
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Order, OrderStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]

NBSP = "\u00a0"


def order_in(customer, number: str, total: int, currency: str, sandbox) -> Order:  # noqa: ANN001
    order = Order.objects.create(
        customer=customer, number=number, status=OrderStatus.DELIVERED, total_cents=total, currency=currency,
        payment_reference=f"pi_amounts_{number}",
    )  # fmt: skip
    sandbox.seed_payment(order.payment_reference, total, currency)
    return order


def refund_asked(customer, order: Order, amount: int) -> ToolCall:  # noqa: ANN001
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund {order.number}")
    advance(ticket.pk, model=ScriptedRefund(json.dumps({"order_number": order.number, "amount_cents": amount})))
    return ToolCall.objects.get(ticket=ticket, name="issue_refund")


@pytest.mark.parametrize(
    ("currency", "total", "amount", "shown"),
    [
        ("isk", 500000, 200000, f"ISK{NBSP}2,000"),  # Stripe: 100 is ISK 1
        ("rsd", 500000, 200000, f"RSD{NBSP}2,000"),  # none in CLDR either; two at Stripe
        ("kwd", 12350, 6170, f"KWD{NBSP}6.170"),
        ("jpy", 5000, 2000, "¥2,000"),
    ],
)
def test_staff_and_the_customer_are_shown_the_amount_the_provider_pays(sandbox, currency, total, amount, shown):  # noqa: ANN001
    customer = make_customer()
    order = order_in(customer, f"M-{currency}", total, currency, sandbox)

    call = refund_asked(customer, order, amount)

    approval = ApprovalRequest.objects.get(tool_call=call)  # a refund outside the policy's currency is reviewed
    (card,) = approval_selectors.approval_cards([approval])
    assert approval.amount_display == shown
    assert approval_selectors.approval_confirmation_text(approval) == f"I confirm a refund of {shown}"
    assert card.order_facts.startswith(f"{order.number}: delivered, total ")
    approver = make_staff("amounts", can_decide=True)
    approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)
    advance(call.ticket_id, model=ScriptedRefund("{}"))
    assert [r["amount"] for r in paid(sandbox, order)] == [amount]
    call.refresh_from_db()
    assert call.result["amount"] == shown
    assert_money_invariants(sandbox)


@pytest.mark.parametrize(
    ("currency", "total", "amount"),
    [("kwd", 12350, 6175), ("bhd", 5000, 2501), ("tnd", 90000, 45005), ("isk", 500000, 150050)],
)
def test_an_amount_the_provider_refuses_in_its_currency_never_reaches_staff(sandbox, currency, total, amount):  # noqa: ANN001
    customer = make_customer()
    order = order_in(customer, f"N-{currency}", total, currency, sandbox)

    call = refund_asked(customer, order, amount)

    assert call.status == CallStatus.FAILED, (call.status, call.error)
    assert "are made in steps of" in call.error
    assert not ApprovalRequest.objects.filter(tool_call=call).exists()
    assert paid(sandbox, order) == []


@pytest.mark.parametrize(("currency", "amount"), [("kwd", 6175), ("omr", 1), ("isk", 150050)])
def test_the_sandbox_refuses_an_amount_stripe_refuses_in_its_currency(payment_sandbox, currency, amount):  # noqa: ANN001
    payment_sandbox.seed_payment(f"pi_steps_{currency}", 500000, currency)

    status, _, body = http(
        payment_sandbox, "POST", "/v1/refunds", {"payment_intent": f"pi_steps_{currency}", "amount": str(amount)}, AUTH
    )

    assert status == 400, (status, body)
    assert body["error"]["param"] == "amount"
    assert payment_sandbox.refunds() == []


def test_the_customer_who_asks_for_an_amount_off_the_step_is_told_which_can_be_refunded(sandbox):  # noqa: ANN001
    customer = make_customer()
    order = order_in(customer, "N-7001", 12350, "kwd", sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund KWD 6.175 of order N-7001."
    )

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=3, until_settled=True)

    answer = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).order_by("-id").first().body
    assert f"KWD{NBSP}6.175 cannot be refunded as it is; KWD{NBSP}6.170 can." in answer, answer
    assert "amount_cents" not in answer
    assert not ApprovalRequest.objects.filter(ticket=ticket).exists()
    assert paid(sandbox, order) == []
