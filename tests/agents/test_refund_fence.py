"""A refund is sent only by the worker that holds the ticket, while the ticket is still the agent's.

The refund's own steps (its ledger row, then each request to the provider) are checked next to
each attempt, not only when the pass began:

- a worker that lost the ticket's lease (paused past its expiry, the ticket taken over by another
  worker) writes no refund row and sends nothing; the worker that holds the lease finishes it
  under the same key, once;
- a person who takes the ticket over while the provider's retry waits out its backoff stops the
  next try: the refund is left uncertain for the reconciler (the earlier try may have reached the
  provider), the call says why, and the run hands the ticket to the person.

Each test reads the payment sandbox's own records (a separate process, over HTTP).
"""

from __future__ import annotations

import pytest
from django.db import connection

from agents import refunds as refund_module
from agents.models import AgentRun, CallStatus, Refund, RefundStatus, RunStatus
from agents.runner import advance
from tests.agents.test_money_gates import Refunds, refund_calls
from tests.agents.test_money_path import assert_money_invariants, order_for, paid, public_words
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.fixture
def provider_requests(monkeypatch):  # noqa: ANN001
    """The refund requests this worker sends to the provider (keys, in order)."""
    sent: list[str] = []
    provider = refund_module.provider()
    create = provider.create_refund

    def counted(**kwargs):  # noqa: ANN003, ANN202
        sent.append(kwargs["idempotency_key"])
        return create(**kwargs)

    monkeypatch.setattr(provider, "create_refund", counted)
    return sent


def lease_taken_by_another_worker(ticket_id: int) -> None:
    """Another worker takes the ticket's lease over (its epoch moves on), as after an expiry."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agents_ticketlease SET epoch = epoch + 1, owner = 'another-worker' WHERE ticket_id = %s",
            [ticket_id],
        )


def that_worker_goes_away(ticket_id: int) -> None:
    """The other worker lets the lease go without finishing (it died after its lease expired)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agents_ticketlease SET owner = '', expires_at = now() - interval '1 second' WHERE ticket_id = %s",
            [ticket_id],
        )


def test_a_worker_that_lost_the_lease_before_the_refund_writes_and_sends_nothing(
    sandbox, provider_requests, monkeypatch
):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "F-1001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund F-1001")
    may_execute = refund_module.may_execute

    def lost_just_before(call):  # noqa: ANN001, ANN202
        lease_taken_by_another_worker(ticket.pk)
        return may_execute(call)

    monkeypatch.setattr(refund_module, "may_execute", lost_just_before)
    advance(ticket.pk, model=Refunds(("F-1001", 5000)))

    assert provider_requests == []
    assert paid(sandbox, order) == []
    assert not Refund.objects.exists()
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.STARTED  # the lease's holder decides what happened

    monkeypatch.setattr(refund_module, "may_execute", may_execute)
    that_worker_goes_away(ticket.pk)
    advance(ticket.pk, model=Refunds(("F-1001", 5000)))

    assert len(paid(sandbox, order)) == 1
    assert Refund.objects.get().status == RefundStatus.SUCCEEDED
    assert_money_invariants(sandbox)


def test_a_worker_that_lost_the_lease_during_the_retry_wait_does_not_try_again(sandbox, provider_requests, monkeypatch):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "F-1002", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund F-1002")
    sandbox.fault("error_before_commit", count=1)
    monkeypatch.setattr(refund_module, "_sleep", lambda seconds: lease_taken_by_another_worker(ticket.pk))

    advance(ticket.pk, model=Refunds(("F-1002", 5000)))

    assert len(provider_requests) == 1  # the first try, which the provider dropped; no second
    assert paid(sandbox, order) == []
    assert Refund.objects.get().status == RefundStatus.SUBMITTED  # left for the lease's holder

    that_worker_goes_away(ticket.pk)
    advance(ticket.pk, model=Refunds(("F-1002", 5000)))

    assert len(paid(sandbox, order)) == 1
    assert set(provider_requests) == {Refund.objects.get().idempotency_key}
    assert Refund.objects.get().status == RefundStatus.SUCCEEDED
    assert_money_invariants(sandbox)


@pytest.mark.parametrize("first_try", ["error_before_commit", "error_after_commit"])
def test_a_take_over_during_the_retry_wait_stops_the_next_try(
    sandbox, person, provider_requests, monkeypatch, first_try
):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "F-1003", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund F-1003")
    sandbox.fault(first_try, count=1)
    monkeypatch.setattr(
        refund_module, "_sleep", lambda seconds: ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    )
    words_before = len(public_words(ticket))

    outcome = advance(ticket.pk, model=Refunds(("F-1003", 5000)))

    assert outcome.state == RunStatus.HANDED_OFF
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
    assert len(provider_requests) == 1
    (call,) = refund_calls(ticket)
    refund = Refund.objects.get()
    assert len(public_words(ticket)) == words_before  # the person answers, not the agent
    if first_try == "error_after_commit":
        # The provider had it: the lookup before the next try finds it, and the ledger says so.
        assert call.status == CallStatus.SUCCEEDED and refund.status == RefundStatus.SUCCEEDED
        assert len(paid(sandbox, order)) == 1
        assert_money_invariants(sandbox)
        return
    assert call.status == CallStatus.UNCERTAIN and "a person took the ticket over" in call.error
    assert refund.status == RefundStatus.UNCERTAIN

    # The reconciler asks the provider under the key; its record wins.
    assert refund_module.reconcile_open_refunds(older_than_seconds=0) == {RefundStatus.FAILED: 1}
    assert paid(sandbox, order) == []
    assert_money_invariants(sandbox)


class WorkerDied(BaseException):
    """The worker stops dead at a fault point (no handler of ours catches it)."""


def test_a_take_over_before_a_refund_is_tried_again_after_a_crash_leaves_it_uncertain_not_unrun(
    sandbox, person, monkeypatch
):  # noqa: ANN001
    """The worker died right after the provider took the refund, before the ledger heard of it. The
    next pass finds the call unfinished and, the provider not showing the refund yet, would try it
    again under its key; a person took the ticket over meanwhile. The call is not recorded as never
    run: an attempt happened. The reconciler then finds the refund and records it."""
    from agents import faults

    customer = make_customer()
    order = order_for(customer, "F-1004", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund F-1004")
    hit = faults.hit

    def dies_after_the_provider(point: str) -> None:
        if point == "after_provider_refund":
            raise WorkerDied()
        hit(point)

    monkeypatch.setattr(faults, "hit", dies_after_the_provider)
    with pytest.raises(WorkerDied):
        advance(ticket.pk, model=Refunds(("F-1004", 5000)))
    monkeypatch.setattr(faults, "hit", hit)
    assert len(paid(sandbox, order)) == 1 and Refund.objects.get().status == RefundStatus.SUBMITTED
    with connection.cursor() as cursor:  # as a killed worker leaves it: held by nobody alive, expired
        cursor.execute(
            "UPDATE agents_ticketlease SET owner = 'dead-worker', expires_at = now() - interval '1 second' "
            "WHERE ticket_id = %s",
            [ticket.pk],
        )

    def not_seen_yet_and_taken_over(key, reference):  # noqa: ANN001, ANN202
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
        return None

    monkeypatch.setattr(refund_module, "_lookup", not_seen_yet_and_taken_over)
    advance(ticket.pk, model=Refunds(("F-1004", 5000)))

    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.UNCERTAIN, (call.status, call.error)
    assert "an earlier attempt may have happened" in call.error
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.HANDED_OFF
    assert len(paid(sandbox, order)) == 1  # not tried again

    monkeypatch.undo()
    refund_module.reconcile_open_refunds(older_than_seconds=0)
    assert Refund.objects.get().status == RefundStatus.SUCCEEDED
    assert_money_invariants(sandbox)
