"""What the model reads of an order (``lookup_order``, ``list_orders``) counts a refund failed without the
provider ever showing it as money that may still be paid, as the refund's own rules do at the payment
(``agents.selectors.failed_unseen_cents``): else the agent offers the customer the whole order back and
the refund is then refused ("has $150.00 left to refund").
"""

from __future__ import annotations

import pytest

from agents import tools
from agents.models import CallStatus, ToolCall
from agents.runner import advance
from tests.agents.test_money_gates import Refunds, only_the_order_threshold
from tests.agents.test_money_path import order_for
from tests.agents.test_refund_failed_unseen import _first_request_stays_on_its_way, _reconciler_gives_up_on_it
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _one_provider_attempt(quick_provider_retries):  # noqa: ANN001
    quick_provider_retries.REFUND_PROVIDER_ATTEMPTS = 1


def _half_refunded_then_failed_unseen(sandbox, monkeypatch, number: str):  # noqa: ANN001, ANN202
    only_the_order_threshold()
    customer = make_customer()
    order = order_for(customer, number, 30000, sandbox)
    _first_request_stays_on_its_way(monkeypatch)
    first, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund $150 on {number}")
    advance(first.pk, model=Refunds((number, 15000)))
    _reconciler_gives_up_on_it()
    return customer, order


def test_the_order_the_model_reads_has_no_more_left_to_refund_than_the_refund_rules_allow(sandbox, monkeypatch):  # noqa: ANN001
    customer, order = _half_refunded_then_failed_unseen(sandbox, monkeypatch, "V-3001")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Again", body="Where is V-3001?")
    ticket = Ticket.objects.select_related("customer").get(pk=ticket.pk)
    call = ToolCall(ticket=ticket, name="lookup_order", arguments={})
    ctx = tools.ToolContext(ticket=ticket, call=call)

    looked_up = tools.REGISTRY["lookup_order"].handler(ctx, {"order_number": "V-3001"})
    (listed,) = tools.REGISTRY["list_orders"].handler(ctx, {})["orders"]

    for summary in (looked_up, listed):
        assert (summary["refundable_cents"], summary["refundable"]) == (15000, "$150.00"), summary


def test_a_customer_asking_for_the_rest_of_the_order_is_offered_what_the_rules_allow(sandbox, monkeypatch):  # noqa: ANN001
    customer, order = _half_refunded_then_failed_unseen(sandbox, monkeypatch, "V-3002")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Again", body="Please refund order V-3002")
    advance(ticket.pk)  # the offline model looks the order up and asks for what is left

    (call,) = ToolCall.objects.filter(ticket=ticket, name="issue_refund")
    assert call.arguments["amount_cents"] == 15000, (call.arguments, call.status, call.error)
    assert call.status != CallStatus.FAILED, call.error
