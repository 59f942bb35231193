"""The offline model reads the amount written, never the digits of the order number beside it.

An amount may be written after its number ("20 €", "20 EUR"): in "refund order R-150 $20" the
digits of the order number followed by the "$" of the amount ("150 $") must not be read as $150.00.
Order numbers are blanked out before any amount is read. Under the threshold, with the customer's
Confirm off (the suite's default), a wrong amount would be paid at once.
"""

from __future__ import annotations

import pytest

from agents.offline_model import OfflineDeterministicModel
from tests.agents.conftest import rung_again_and_again
from tests.agents.test_money_path import paid
from tests.agents.test_offline_model_reads_the_request import order_in
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.parametrize(
    ("currency", "body", "asked_cents"),
    [
        ("usd", "Please refund order R-150 $20, the mug was broken.", 2000),
        ("eur", "Please refund R-150 €20 for the missing item.", 2000),
        ("eur", "Please refund order R-150 EUR 20, one item was missing.", 2000),
    ],
)
def test_the_amount_refunded_is_the_amount_written_not_the_order_number(sandbox, currency, body, asked_cents):  # noqa: ANN001
    customer, order = order_in(sandbox, number="R-150", total_cents=18000, currency=currency)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=body)

    rung_again_and_again(ticket.pk, OfflineDeterministicModel(), rings=5, until_settled=True)

    refunds = [r["amount"] for r in paid(sandbox, order)]
    assert refunds in ([], [asked_cents]), (
        f"the customer wrote {body!r} (asking for {asked_cents} minor units) and the provider refunded "
        f"{refunds}: the order number's digits were read as the amount"
    )
