"""The per-customer refund window is measured on the database's clock, not the deciding worker's.

A refund needs a staff approval when it takes the customer's refunds in the policy's window (30
days) above the limit. The window's start was the clock of the worker deciding, less the window: on
many hosts, a worker whose clock ran a quarter of an hour ahead left out a refund paid 29 days and 23
hours and 50 minutes ago, and paid the next one to the same customer without anyone's approval. And
a refund's time was the clock of the worker that paid it: one running behind recorded it as older
than it is, and it left the window early.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from agents.models import Refund, ToolCall
from agents.runner import advance
from approvals.models import ApprovalPolicy, ApprovalRequest
from tests.agents.test_backoff_clock import on_a_host_whose_clock_is_off
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.mark.parametrize(
    ("paying", "deciding"),
    [(timedelta(0), timedelta(minutes=15)), (timedelta(minutes=-15), timedelta(0))],
    ids=["deciding-worker-ahead", "paying-worker-behind"],
)
def test_a_refund_still_in_the_window_is_counted_whatever_the_workers_clocks_say(sandbox, paying, deciding):  # noqa: ANN001
    policy = ApprovalPolicy.current()
    policy.refund_threshold_cents = 1000
    policy.save()
    customer = make_customer()
    first, second = order_for(customer, "W-3010", 3000, sandbox), order_for(customer, "W-3020", 3000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $9.50 on order W-3010"
    )
    with pytest.MonkeyPatch.context() as host:
        on_a_host_whose_clock_is_off(host, paying)
        # A column's default is the clock function itself, taken when the model was defined.
        host.setattr(Refund._meta.get_field("created_at"), "_get_default", timezone.now)
        advance(ticket.pk)
    assert len(paid(sandbox, first)) == 1
    # As if paid 29 days, 23 hours and 50 minutes ago on the database's clock (still in the 30-day
    # window): every time recorded then is moved back by as much.
    back = timedelta(days=policy.customer_window_days) - timedelta(minutes=10)
    assert Refund.objects.filter(order=first).update(created_at=F("created_at") - back) == 1
    ToolCall.objects.filter(ticket=ticket).update(started_at=F("started_at") - back)

    with pytest.MonkeyPatch.context() as host:
        on_a_host_whose_clock_is_off(host, deciding)
        again, _ = ticket_services.ticket_open(
            customer=customer, subject="Refund", body="Please refund $9.50 on order W-3020"
        )
        advance(again.pk)

    assert paid(sandbox, second) == [], "the second refund was paid without an approval"
    asked = ApprovalRequest.objects.filter(ticket=again).values_list("reason", flat=True)
    assert [reason for reason in asked if "refunds to one customer above $10.00" in reason], list(asked)
