"""A refund the reconciler finds paid while the worker is giving up on it is told as paid.

The provider pays the refund but its answer is lost, and every retry and lookup under the key
fails too. Between the worker's last try and its give-up, the reconciler (beat) asks the provider
and records the refund as paid (or pending at the provider). The worker's give-up reads the refund
again under the lock the reconciler takes: the customer is told it was refunded, not "we couldn't
confirm your refund", and the ticket is not handed to a person to check a failure that did not
happen (who might refund it again).
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest

from agents import refunds as refund_module
from agents.models import CallStatus, Refund, RefundStatus, ToolCall
from agents.runner import advance
from tests.agents.test_money_path import assert_money_invariants, order_for, paid, public_words
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message, Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def settle_as_the_reconciler(sandbox, settles_to: str) -> None:  # noqa: ANN001
    """The reconciler's write, as beat makes it: from the provider's record of the refund under its key."""
    sandbox.clear_faults()  # the provider answers again
    if settles_to == "succeeded":
        assert refund_module.reconcile_open_refunds() == {RefundStatus.SUCCEEDED: 1}
        return
    # The sandbox pays at once; a provider still processing it answers "pending" under the same key.
    refund = Refund.objects.select_related("order").get()
    found = refund_module.provider().find_refund(
        idempotency_key=refund.idempotency_key, payment_reference=refund.order.payment_reference
    )
    assert found is not None
    pending = dataclasses.replace(found, status="pending")
    assert refund_module._record_provider_state(refund, pending) == RefundStatus.PENDING


def after_the_last_try(monkeypatch, settings, then) -> list[str]:  # noqa: ANN001
    """Each refund request the worker sends is noted; right after its last try (before it gives up),
    ``then(create, kwargs)`` runs: the reconciler's write. The keys tried, as they come."""
    provider = refund_module.provider()
    create = provider.create_refund
    tries: list[str] = []

    def noted(**kwargs):  # noqa: ANN003, ANN202
        tries.append(kwargs["idempotency_key"])
        try:
            return create(**kwargs)
        finally:
            if len(tries) == settings.REFUND_PROVIDER_ATTEMPTS:
                then(create, kwargs)

    monkeypatch.setattr(provider, "create_refund", noted)
    return tries


@pytest.mark.parametrize("settles_to", ["succeeded", "pending"])
def test_a_refund_settled_by_the_reconciler_while_the_worker_gives_up_is_told_as_refunded(
    sandbox,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
    settings,  # noqa: ANN001
    settles_to: str,
) -> None:
    customer = make_customer()
    order = order_for(customer, "E-3101", 5000, sandbox)
    sandbox.fault("error_after_commit")  # the provider pays; its answer is lost
    sandbox.fault("error_before_commit", count=100)  # every retry under the key fails
    sandbox.fault("error_before_commit", method="GET", path="/v1/refunds*", count=100)  # so does every lookup
    tries = after_the_last_try(
        monkeypatch, settings, lambda create, kwargs: settle_as_the_reconciler(sandbox, settles_to)
    )
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order E-3101")

    advance(ticket.pk)

    assert len(tries) == settings.REFUND_PROVIDER_ATTEMPTS  # the worker did give up after its last try
    refund = Refund.objects.get(order=order)
    assert refund.status == settles_to and refund.escalated_at is None
    assert [r["amount"] for r in paid(sandbox, order)] == [5000]
    words = public_words(ticket)
    assert not any("couldn't confirm" in w or "could not be completed" in w for w in words), words
    told = "I've refunded $50.00" if settles_to == "succeeded" else "I've submitted a refund of $50.00"
    assert any(told in w for w in words), words
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.SUCCEEDED and call.result["status"] == settles_to
    status = Ticket.objects.get(pk=ticket.pk).status
    assert status != TicketStatus.WITH_HUMAN, f"a refund the provider paid was handed to a person: {status}"
    assert not ticket.events.filter(kind__in=["tool_call_escalated", "refund_escalated"]).exists()
    assert not Message.objects.filter(ticket=ticket, is_public=False, body__contains="needs a person").exists()
    assert_money_invariants(sandbox)


def test_a_refund_the_reconciler_settles_as_failed_while_the_worker_gives_up_is_told_to_the_customer_once(
    sandbox,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
    settings,  # noqa: ANN001
) -> None:
    # Every try fails before the provider keeps it; between the last try and the give-up, the
    # reconciler hears from the provider that the refund failed: it tells the customer and hands the
    # ticket to a person. The worker's give-up finds it settled and does not tell the customer again.
    customer = make_customer()
    order = order_for(customer, "E-3102", 5000, sandbox)
    sandbox.fault("error_before_commit", count=100)

    def the_reconciler_settles_it_failed(create, kwargs):  # noqa: ANN001, ANN202
        # The request reaches the provider after all (one still on its way), which fails it;
        # beat's reconciler reads that under the key: the customer is told, a person asked.
        sandbox.clear_faults()
        sandbox.fault("refund_status:failed")
        with contextlib.suppress(Exception):
            create(**kwargs)
        assert refund_module.reconcile_open_refunds() == {RefundStatus.FAILED: 1}

    tries = after_the_last_try(monkeypatch, settings, the_reconciler_settles_it_failed)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order E-3102")

    advance(ticket.pk)

    assert len(tries) == settings.REFUND_PROVIDER_ATTEMPTS
    assert Refund.objects.get(order=order).status == RefundStatus.FAILED
    assert [r["status"] for r in paid(sandbox, order)] == ["failed"]
    words = public_words(ticket)
    assert sum("could not be completed" in w for w in words) == 1, words
    assert not any("couldn't confirm" in w for w in words), words
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.FAILED and call.error.startswith("Not sent again"), (call.status, call.error)
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
    assert ticket.events.filter(kind="refund_escalated").count() == 1
    assert_money_invariants(sandbox)


def test_a_refund_the_reconciler_finds_paid_just_after_the_worker_gave_up_is_not_told_as_unconfirmed(
    sandbox,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
) -> None:
    # The worker has recorded that it gives up (the refund uncertain); before it tells the customer,
    # beat's reconciler hears from the provider that the refund was paid and records it. The words
    # the worker was about to post ("we couldn't confirm your refund") are decided again, on the
    # refund as it is then, in the transaction that would post them: it was paid, so the call's
    # result is the refund's, the customer reads that it was refunded, and no one is asked to check.
    from agents import faults

    customer = make_customer()
    order = order_for(customer, "E-3103", 5000, sandbox)
    sandbox.fault("error_after_commit")  # the provider pays; its answer is lost
    sandbox.fault("error_before_commit", count=100)  # every retry under the key fails
    sandbox.fault("error_before_commit", method="GET", path="/v1/refunds*", count=100)  # so does every lookup
    hit = faults.hit

    def the_reconciler_then(point: str) -> None:
        if point == "after_refund_given_up":
            assert Refund.objects.get(order=order).status == RefundStatus.UNCERTAIN  # the worker gave up
            sandbox.clear_faults()
            assert refund_module.reconcile_open_refunds() == {RefundStatus.SUCCEEDED: 1}
        hit(point)

    monkeypatch.setattr(faults, "hit", the_reconciler_then)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order E-3103")

    advance(ticket.pk)

    refund = Refund.objects.get(order=order)
    assert refund.status == RefundStatus.SUCCEEDED
    assert [r["amount"] for r in paid(sandbox, order)] == [5000]
    words = public_words(ticket)
    assert not any("couldn't confirm" in w or "could not be completed" in w for w in words), words
    assert any("I've refunded $50.00" in w for w in words), words
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.SUCCEEDED and call.result["status"] == "succeeded"
    assert Ticket.objects.get(pk=ticket.pk).status != TicketStatus.WITH_HUMAN
    assert not ticket.events.filter(kind__in=["tool_call_escalated", "refund_escalated"]).exists()
    assert_money_invariants(sandbox)


def test_a_refund_the_reconciler_escalates_just_after_the_worker_gave_up_is_told_to_the_customer_once(
    sandbox,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
) -> None:
    # The worker has recorded that it gives up (the refund unconfirmed); before it tells the customer,
    # beat's reconciler, past its bound and still unable to ask the provider, tells them and hands the
    # ticket to a person. The worker's words are decided under the refund's lock: it says nothing more.
    from agents import faults

    customer = make_customer()
    order = order_for(customer, "E-3104", 5000, sandbox)
    sandbox.fault("error_before_commit", count=100)  # no try reaches the provider
    sandbox.fault("error_before_commit", method="GET", path="/v1/refunds*", count=100)  # nor any lookup
    hit = faults.hit

    def the_reconciler_then(point: str) -> None:
        if point == "after_refund_given_up":
            assert Refund.objects.get(order=order).status == RefundStatus.UNCERTAIN
            refund_module.reconcile_open_refunds(older_than_seconds=0)
        hit(point)

    monkeypatch.setattr(faults, "hit", the_reconciler_then)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order E-3104")

    advance(ticket.pk)

    words = public_words(ticket)
    assert sum("couldn't confirm your refund" in w for w in words) == 1, words
    assert not any("could not be completed" in w for w in words), words
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
    assert Refund.objects.get(order=order).status == RefundStatus.UNCERTAIN
    assert paid(sandbox, order) == []
