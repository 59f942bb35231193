"""The dashboard's confirmation level (APPROVAL_CONFIRM_ABOVE_CENTS, $500.00 by default) is an amount of
the approval policy's currency. A refund in another currency is not compared with it, as the policy's
threshold is not: it asks for the tick whatever its amount. Compared by its number, £480.00 (about
$610) and CHF 490.00 were approved with one click, under a level set for $500.00. A refund in the
policy's currency below the level still needs no tick."""

from __future__ import annotations

import pytest

from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import Refunds
from tests.approvals.test_dashboard_cards import card_html, card_text, dashboard
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _paused(sandbox, number: str, cents: int, currency: str) -> ApprovalRequest:  # noqa: ANN001
    customer = make_customer(flagged=True)  # every refund of theirs waits for staff
    order = make_order(customer, number=number, total_cents=cents)
    order.currency = currency
    order.save(update_fields=["currency"])
    sandbox.seed_payment(order.payment_reference, order.total_cents, currency)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund {number}")
    advance(ticket.pk, model=Refunds((number, cents)))
    return ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)


@pytest.mark.parametrize(("currency", "cents", "money"), [("gbp", 48000, "£480.00"), ("chf", 49000, "CHF\u00a0490.00")])
def test_a_refund_in_another_currency_asks_for_the_tick_whatever_its_number(
    sandbox, client, approver, currency, cents, money
):  # noqa: ANN001, E501
    approval = _paused(sandbox, "G-1001", cents, currency)
    client.force_login(approver)

    card = card_html(dashboard(client), approval)
    assert 'name="confirm_amount"' in card, f"approving {money} (above $500.00) asked for no confirmation"
    assert f"I confirm a refund of {' '.join(money.split())}" in card_text(dashboard(client), approval)

    unticked = client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve"})
    assert unticked.status_code == 400 and "needs a confirmation" in unticked.content.decode()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING

    ticked = client.post(
        f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve", "confirm_amount": str(cents)}
    )
    assert ticked.status_code == 302
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED


def test_a_refund_in_the_policys_currency_below_the_level_needs_no_tick(sandbox, client, approver):  # noqa: ANN001
    approval = _paused(sandbox, "G-1002", 48000, "usd")
    client.force_login(approver)

    assert 'name="confirm_amount"' not in card_html(dashboard(client), approval)
    assert client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve"}).status_code == 302
