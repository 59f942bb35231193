"""A payment provider that hangs holds one worker for one timeout a round, not the workers the tickets need.

The reconciler asked the provider about each open refund in turn, each question waiting out
PAYMENTS_TIMEOUT_SECONDS: a provider that accepts connections and never answers held a round for a
timeout per open refund, and an outage leaves a refund open for every one tried during it. Rounds
outlasted their interval, so beat's ticks ran side by side on every worker process, ahead of the
tickets' doorbells. Now a provider that does not answer is asked once a round (the other refunds
are settled as that one was: each goes to a person once past the bound), and one round runs at a
time: a tick that comes while one runs returns at once. (Beat's ticks carry no expiry: that would
compare beat's clock with each worker's.)
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection

from agents import refunds as refund_module
from agents.models import Refund, RefundStatus
from agents.runner import advance
from payments.provider import PaymentProvider
from tests.agents.test_money_path import order_for
from tests.agents.test_reconciler_races_worker import WorkerStopped, its_lease_expired_long_ago
from tests.agents.test_refunds import ScriptedRefund
from tests.conftest import make_customer, silent_server
from tickets import services as ticket_services
from tickets.models import Message, Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def refunds_left_submitted_long_ago(sandbox, monkeypatch, count: int) -> list[Ticket]:  # noqa: ANN001
    """``count`` tickets, each with a refund whose worker stopped after its intent, before the
    provider heard of it, long enough ago for the reconciler to give up on it."""
    provider = refund_module.provider()
    create = provider.create_refund

    def stop(**kwargs):  # noqa: ANN003, ANN202
        raise WorkerStopped()

    monkeypatch.setattr(provider, "create_refund", stop)
    tickets = []
    for n in range(count):
        customer = make_customer()
        number = f"HP-{1001 + n}"
        order_for(customer, number, 10000, sandbox)
        ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund $40 of {number}")
        with pytest.raises(WorkerStopped):
            advance(ticket.pk, model=ScriptedRefund(json.dumps({"order_number": number, "amount_cents": 4000})))
        tickets.append(ticket)
    monkeypatch.setattr(provider, "create_refund", create)
    its_lease_expired_long_ago()
    Refund.objects.update(updated_at=Refund.objects.earliest("created_at").created_at.replace(year=2000))
    assert Refund.objects.filter(status=RefundStatus.SUBMITTED).count() == count
    return tickets


def test_a_provider_that_never_answers_is_asked_once_a_round_and_every_open_refund_still_goes_to_a_person(
    sandbox, monkeypatch
):  # noqa: ANN001
    tickets = refunds_left_submitted_long_ago(sandbox, monkeypatch, 4)

    with silent_server() as (port, accepted):
        monkeypatch.setattr(
            refund_module, "_provider", PaymentProvider(api_base=f"http://127.0.0.1:{port}", timeout_seconds=1)
        )
        counts = refund_module.reconcile_open_refunds()
        asked = len(accepted)

    assert asked == 1, f"a provider that never answers was asked {asked} times in one round, a timeout each"
    assert counts == {RefundStatus.SUBMITTED: 4}
    for ticket in tickets:
        refund = Refund.objects.get(ticket=ticket)
        # Each goes to a person, who is told the provider could not be asked; the customer once.
        assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
        note = Message.objects.get(ticket=ticket, client_msg_id=f"refund-note:{refund.pk}:1")
        assert "could not be asked" in note.body
        assert Message.objects.filter(ticket=ticket, client_msg_id__startswith=f"refund-told:{refund.pk}:").count() == 1


def test_a_second_round_while_one_is_under_way_holds_no_second_worker(sandbox, monkeypatch):  # noqa: ANN001
    refunds_left_submitted_long_ago(sandbox, monkeypatch, 1)
    under_way, may_end = threading.Event(), threading.Event()
    real_reconcile = refund_module.refund_reconcile

    def slow(**kwargs):  # noqa: ANN003, ANN202
        under_way.set()
        may_end.wait(30)  # a provider that takes its time to answer
        return real_reconcile(**kwargs)

    monkeypatch.setattr(refund_module, "refund_reconcile", slow)
    first: dict = {}

    def round_on_another_worker() -> None:
        try:
            first["counts"] = refund_module.reconcile_open_refunds()
        finally:
            connection.close()

    thread = threading.Thread(target=round_on_another_worker)
    thread.start()
    try:
        assert under_way.wait(30)
        # The next tick, on another worker, while the first round waits for the provider.
        second = refund_module.reconcile_open_refunds()
    finally:
        may_end.set()
        thread.join(60)

    assert second == {}, "a second round ran beside the first, holding a second worker on the same provider"
    assert first["counts"] == {RefundStatus.FAILED: 1}
