"""A keyed refund call left started by a crash after the provider paid is never recorded "not run".

It is marked as tried. When the next pass ends the run because a person took the ticket during
the backoff, it reconciles the call under its key first (recorded paid); when the run is parked
after the failure limit, the call is closed uncertain ("tried, may have happened"). Staff and the
model never read that nothing was refunded.
"""

from __future__ import annotations

import pytest
from django.db import OperationalError

from agents import refunds as refund_module
from agents.models import AgentRun, CallStatus, Refund, RefundStatus
from agents.runner import advance
from tests.agents.conftest import retry_time_comes
from tests.agents.test_keyed_call_crash_is_reconciled import RefundThenSay
from tests.agents.test_money_gates import refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _crash_after_the_provider_paid(monkeypatch, times: int):  # noqa: ANN001, ANN202
    record = refund_module._record_provider_state
    blips = {"left": times}

    def connection_drops(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if blips["left"]:
            blips["left"] -= 1
            raise OperationalError("server closed the connection unexpectedly")
        return record(*args, **kwargs)

    monkeypatch.setattr(refund_module, "_record_provider_state", connection_drops)


def test_a_paid_refund_is_not_recorded_not_run_when_a_person_takes_the_ticket_during_the_backoff(
    sandbox,
    person,
    monkeypatch,  # noqa: ANN001, F811
):
    customer = make_customer()
    order = order_for(customer, "RV-1703", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $20 on RV-1703")
    _crash_after_the_provider_paid(monkeypatch, times=1)

    outcome = advance(ticket.pk, model=RefundThenSay())
    assert outcome.state == "retry"  # the crash is counted; the call stays started
    assert [r["amount"] for r in paid(sandbox, order)] == [2000]  # the provider paid it

    # A person takes the ticket while the run waits out its backoff; the retry comes.
    ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    retry_time_comes(ticket.pk)
    advance(ticket.pk, model=RefundThenSay())

    refund_module.reconcile_open_refunds(older_than_seconds=0)  # beat's reconciler
    (call,) = refund_calls(ticket)
    assert AgentRun.objects.get(ticket=ticket).status != "running"
    # The money ledger knows it was paid ...
    assert list(Refund.objects.filter(tool_call=call).values_list("status", flat=True)) == [RefundStatus.SUCCEEDED]
    # The provider paid under the call's key: the ledger must not say it never ran.
    assert call.status in {CallStatus.SUCCEEDED, CallStatus.UNCERTAIN}, (
        f"a refund the provider paid is recorded {call.status}: {call.error!r} / {call.result!r}"
    )


def test_a_paid_refund_is_not_recorded_not_run_when_the_run_is_parked(sandbox, monkeypatch, settings):  # noqa: ANN001
    # The database's blips counted as any failure, so that the run is parked within these passes (an
    # outage is otherwise tried again for AGENT_OUTAGE_PATIENCE_SECONDS: tests/agents/test_outage_patience.py).
    settings.AGENT_OUTAGE_PATIENCE_SECONDS = 0
    customer = make_customer()
    order = order_for(customer, "RV-1703", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $20 on RV-1703")
    _crash_after_the_provider_paid(monkeypatch, times=100)  # the recording keeps failing

    states = []
    for _ in range(6):
        outcome = advance(ticket.pk, model=RefundThenSay())
        states.append(outcome.state)
        if outcome.state != "retry":
            break
        retry_time_comes(ticket.pk)
    assert states[-1] == "parked", states
    assert [r["amount"] for r in paid(sandbox, order)] == [2000]  # paid once, under its one key

    (call,) = refund_calls(ticket)
    assert call.status in {CallStatus.SUCCEEDED, CallStatus.UNCERTAIN}, (
        f"a refund the provider paid is recorded {call.status}: {call.error!r} / {call.result!r}"
    )
