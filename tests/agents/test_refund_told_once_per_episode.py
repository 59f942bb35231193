"""Each move of a refund between outcomes the customer or staff hear of is told once, never zero times.

A refund may move more than once between the outcomes people are told about: given up on as
unconfirmed, failed by the reconciler, found pending at the provider after all (a request still on
its way landed), then failed by the bank. The telling was keyed by the refund alone (the customer's
"refund-problem", the staff note by status): the second failure found the first one's keys used and
said nothing, so the customer's last word was that the refund was on its way and nobody was asked
to act. Now each told move is an episode of the refund's own history, keyed by its number: told
once however often the reconciler asks, by whichever of two reconcilers gets there first, and told
in the transaction that records the move, so a reconciler that dies between the two leaves neither.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from agents import refunds as refund_module
from agents.models import Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.agents.test_refund_failed_unseen import _first_request_stays_on_its_way
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketEvent, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

# What a customer reads about a refund, by the words of each outcome.
WORDS = {
    "unconfirmed": "couldn't confirm",
    "failed": "could not be completed",
    "pending": "processing it after all",
    "paid": "went through after all",
}


def told_the_customer(ticket: Ticket) -> list[str]:
    """The outcomes the customer read about their refund, in order (one per system message)."""
    said = []
    for body in Message.objects.filter(ticket=ticket, is_public=True, author_kind=AuthorKind.SYSTEM).order_by("pk"):
        outcomes = [outcome for outcome, words in WORDS.items() if words in body.body]
        assert len(outcomes) == 1, f"a message about the refund says {outcomes or 'nothing known'}: {body.body}"
        said.append(outcomes[0])
    return said


def staff_notes(ticket: Ticket) -> list[str]:
    return list(
        Message.objects.filter(ticket=ticket, is_public=False, client_msg_id__startswith="refund-note:")
        .order_by("pk")
        .values_list("body", flat=True)
    )


@pytest.fixture
def landing_later(sandbox, monkeypatch, quick_provider_retries):  # noqa: ANN001
    """A refund of $50 on order EP-1001 whose request left but got no answer (the provider has no record
    yet): its worker gave it up as unconfirmed, the customer was told so and a person took the ticket.
    Returns (ticket, refund, land): ``land()`` delivers the request, ``pending`` at the provider."""
    quick_provider_retries.REFUND_PROVIDER_ATTEMPTS = 1
    customer = make_customer()
    order_for(customer, "EP-1001", 5000, sandbox)
    held = _first_request_stays_on_its_way(monkeypatch)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $50 on EP-1001")
    advance(ticket.pk, model=Refunds(("EP-1001", 5000)))
    refund = Refund.objects.get(ticket=ticket)
    assert refund.status == RefundStatus.UNCERTAIN
    assert told_the_customer(ticket) == ["unconfirmed"]

    def land() -> None:
        sandbox.fault("refund_status:pending")  # the bank has not settled it yet
        held["land"]()

    return ticket, refund, land


def test_a_refund_failed_then_pending_then_failed_again_is_told_at_each_move(sandbox, landing_later):  # noqa: ANN001
    ticket, refund, land = landing_later
    person = make_staff("episode-person", can_decide=False)

    # Past the bound the provider has no record under the key: failed; the person reads it, hands back.
    assert refund_module.refund_reconcile(refund=refund, older_than_seconds=0) == RefundStatus.FAILED
    assert told_the_customer(ticket) == ["unconfirmed", "failed"]
    ticket_services.ticket_hand_back(ticket=ticket, user=person)

    land()  # the request lands after all: pending at the provider
    refund_module.reconcile_open_refunds()
    refund.refresh_from_db()
    assert refund.status == RefundStatus.PENDING, (refund.status, refund.error)
    assert told_the_customer(ticket) == ["unconfirmed", "failed", "pending"]
    assert "PENDING" in staff_notes(ticket)[-1], staff_notes(ticket)

    sandbox.settle_refund(refund.provider_refund_id, "failed")  # the bank turns it down
    refund_module.reconcile_open_refunds()
    refund_module.reconcile_open_refunds()  # asked again: nothing more to say

    refund.refresh_from_db()
    assert refund.status == RefundStatus.FAILED
    said = told_the_customer(ticket)
    assert said == ["unconfirmed", "failed", "pending", "failed"], f"the customer read, in order: {said}"
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN, "nobody was asked to act on the second failure"
    escalated = TicketEvent.objects.filter(ticket=ticket, kind="refund_escalated")
    assert escalated.count() == 2, list(escalated.values_list("payload", flat=True))
    assert len(staff_notes(ticket)) == 3, staff_notes(ticket)  # failed, pending again, failed again
    assert_money_invariants(sandbox)


def test_a_refund_failed_then_pending_then_paid_is_told_paid_once(sandbox, landing_later):  # noqa: ANN001
    ticket, refund, land = landing_later
    assert refund_module.refund_reconcile(refund=refund, older_than_seconds=0) == RefundStatus.FAILED
    land()
    refund_module.reconcile_open_refunds()
    refund.refresh_from_db()
    sandbox.settle_refund(refund.provider_refund_id, "succeeded")
    refund_module.reconcile_open_refunds()
    refund_module.reconcile_open_refunds()

    refund.refresh_from_db()
    assert refund.status == RefundStatus.SUCCEEDED
    assert told_the_customer(ticket) == ["unconfirmed", "failed", "pending", "paid"]
    assert [r["metadata"]["idempotency_key"] for r in paid(sandbox, refund.order)] == [refund.idempotency_key]


def test_a_second_reconciler_with_the_refund_read_before_the_first_settled_it_tells_nobody_again(
    sandbox,  # noqa: ANN001
    landing_later,  # noqa: ANN001
):
    ticket, refund, land = landing_later
    assert refund_module.refund_reconcile(refund=refund, older_than_seconds=0) == RefundStatus.FAILED
    land()
    refund_module.reconcile_open_refunds()
    refund = Refund.objects.select_related("order").get(pk=refund.pk)
    stale = Refund.objects.select_related("order").get(pk=refund.pk)  # the second round's read: pending
    sandbox.settle_refund(refund.provider_refund_id, "failed")

    assert refund_module.refund_reconcile(refund=refund) == RefundStatus.FAILED
    assert refund_module.refund_reconcile(refund=stale) == RefundStatus.FAILED

    assert told_the_customer(ticket) == ["unconfirmed", "failed", "pending", "failed"]
    assert TicketEvent.objects.filter(ticket=ticket, kind="refund_escalated").count() == 2


def test_a_reconciler_that_dies_after_recording_a_failure_leaves_it_to_be_told(sandbox, landing_later, monkeypatch):  # noqa: ANN001
    """The reconciler records the bank's failure, then dies before anyone is told (the staff note is
    where it stops): the next round must still tell the customer and hand the ticket to a person."""
    ticket, refund, land = landing_later
    assert refund_module.refund_reconcile(refund=refund, older_than_seconds=0) == RefundStatus.FAILED
    person = make_staff("episode-person", can_decide=False)
    ticket_services.ticket_hand_back(ticket=ticket, user=person)
    land()
    refund_module.reconcile_open_refunds()
    refund.refresh_from_db()
    sandbox.settle_refund(refund.provider_refund_id, "failed")

    real_post = ticket_services.message_post
    died: list[str] = []

    def dies_at_the_note(**kwargs):  # noqa: ANN003, ANN202
        if not died and not kwargs.get("is_public", True):
            died.append(kwargs.get("client_msg_id") or "")
            raise RuntimeError("the reconciler's process died here")
        return real_post(**kwargs)

    monkeypatch.setattr(refund_module.ticket_services, "message_post", dies_at_the_note)
    refund_module.reconcile_open_refunds()  # the row fails, the round goes on (and the process "died")
    assert died, "the reconciler told staff nothing about the failure"
    refund_module.reconcile_open_refunds()  # the next round

    refund.refresh_from_db()
    assert refund.status == RefundStatus.FAILED
    said = told_the_customer(ticket)
    assert said == ["unconfirmed", "failed", "pending", "failed"], f"the customer read, in order: {said}"
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN


def test_the_second_failure_reconciled_from_the_admin_is_told_and_goes_to_a_person(
    admin_client,  # noqa: ANN001
    sandbox,  # noqa: ANN001
    landing_later,  # noqa: ANN001
):
    ticket, refund, land = landing_later
    assert refund_module.refund_reconcile(refund=refund, older_than_seconds=0) == RefundStatus.FAILED
    ticket_services.ticket_hand_back(ticket=ticket, user=make_staff("episode-person", can_decide=False))
    land()
    refund_module.reconcile_open_refunds()
    refund.refresh_from_db()
    sandbox.settle_refund(refund.provider_refund_id, "failed")

    action = {"action": "reconcile_refunds", "_selected_action": [refund.pk]}
    assert admin_client.post("/admin/agents/refund/", action).status_code == 302
    assert admin_client.post("/admin/agents/refund/", action).status_code == 302  # pressed twice

    assert told_the_customer(ticket) == ["unconfirmed", "failed", "pending", "failed"]
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    last = TicketEvent.objects.filter(ticket=ticket, kind="refund_escalated").order_by("-seq").first()
    assert last is not None and last.actor_user_id is not None, "the admin's escalation names nobody"


def test_a_refund_pending_too_long_then_failed_is_told_it_failed(sandbox, settings):  # noqa: ANN001
    """Pending past the bound: the customer reads it could not be confirmed, a person takes it. Then the
    bank turns it down: the customer, who last read "a member of our team will check it", learns it
    failed, and the person a note; pending again never repeats the first words."""
    customer = make_customer()
    order_for(customer, "EP-2001", 5000, sandbox)
    sandbox.fault("refund_status:pending")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $20 on EP-2001")
    advance(ticket.pk, model=Refunds(("EP-2001", 2000)))
    refund = Refund.objects.get(ticket=ticket)
    assert refund.status == RefundStatus.PENDING
    assert told_the_customer(ticket) == []  # the agent's own reply said it is processing
    settings.REFUND_UNCERTAIN_AFTER_SECONDS = 0

    refund_module.reconcile_open_refunds()
    refund_module.reconcile_open_refunds()  # still pending: nothing new
    assert told_the_customer(ticket) == ["unconfirmed"]

    sandbox.settle_refund(refund.provider_refund_id, "failed")
    refund_module.reconcile_open_refunds()
    refund_module.reconcile_open_refunds()

    refund.refresh_from_db()
    assert refund.status == RefundStatus.FAILED
    assert told_the_customer(ticket) == ["unconfirmed", "failed"]
    assert len(staff_notes(ticket)) == 2, staff_notes(ticket)


def test_two_reconcilers_at_once_tell_the_second_failure_once(sandbox, landing_later):  # noqa: ANN001
    """Two rounds (two beat ticks on two hosts, or beat and the admin) settle the same refund at the same
    moment, each on its own connection: the customer reads the failure once."""
    ticket, refund, land = landing_later
    assert refund_module.refund_reconcile(refund=refund, older_than_seconds=0) == RefundStatus.FAILED
    land()
    refund_module.reconcile_open_refunds()
    refund.refresh_from_db()
    sandbox.settle_refund(refund.provider_refund_id, "failed")
    start, results = threading.Barrier(2), []

    def a_round() -> None:
        try:
            mine = Refund.objects.select_related("order").get(pk=refund.pk)  # read pending, as a round reads
            start.wait(timeout=30)
            results.append(refund_module.refund_reconcile(refund=mine))
        finally:
            connection.close()

    rounds = [threading.Thread(target=a_round) for _ in range(2)]
    for one in rounds:
        one.start()
    for one in rounds:
        one.join(timeout=60)

    assert results == [RefundStatus.FAILED, RefundStatus.FAILED], results
    assert told_the_customer(ticket) == ["unconfirmed", "failed", "pending", "failed"]
    assert TicketEvent.objects.filter(ticket=ticket, kind="refund_escalated").count() == 2
