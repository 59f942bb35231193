"""A refund a person stopped is still reviewed when asked again after the ticket was moved with a
default (pseudonymised) state bundle -- unless the customer ever wrote the order number on its own.

README, "Refunds: the rules": a refund on an order on which a person stopped one (took over, resolved
or closed the ticket while it waited to be paid), in any ticket: asking again is reviewed.
README, "Moving a deployment": a pseudonymised bundle withholds what the customer wrote wherever the
bundle repeats it word for word, but "Order numbers, amounts, statuses, the agent's and staff's own
words, and tool arguments and results are kept"; "a restored ticket without it continues with the
pseudonyms".

A customer who answers "which order?" with just the number ("ORD-24010", 8+ characters) makes that
number "the customer's words": every tool call's ``order_number`` in the bundle becomes
"[withheld: the customer's words]". Restored, the call a person stopped names no order any more, so
``agents.refunds._stopped_before`` (and ``refund_commitments``, which reads the same argument) no
longer finds it: the same refund asked again in a new ticket goes unreviewed.
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus
from agents.runner import advance
from tests.agents.test_money_gates import confirm, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.agents.test_refund_a_person_stopped_matrix import AsksForTheRefund
from tests.conftest import make_customer
from tests.state.conftest import export
from tests.state.test_bundle import empty_the_ledger, restore
from tickets import services as ticket_services
from tickets.models import AuthorKind, Customer, Order

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries", "state_bundle_key"),  # the move signs its bundle
    pytest.mark.customer_confirms,  # nothing is paid in this test: the question is whether staff review it
]


def stopped_moved_and_asked_again(tmp_path, ticket, model, person, number: str):  # noqa: ANN001, ANN201
    """A person stops the ticket's refund (waiting for the customer's Confirm); the ticket moves in
    the default (pseudonymised) bundle; on the restored deployment the customer asks for the same
    refund in a new ticket, and confirms it if asked. Returns the new request's call."""
    advance(ticket.pk, model=model)  # the refund waits for the customer's Confirm
    ticket_services.ticket_take_over(ticket=ticket.pk, user=person)  # a person stops it
    advance(ticket.pk, model=model)
    (first,) = refund_calls(ticket)
    assert first.status == CallStatus.CANCELLED and "a person took the ticket over" in first.error

    path = export(tmp_path, ticket)  # the default bundle: pseudonymised
    empty_the_ledger()
    restore(path)

    customer = Customer.objects.get(pk=ticket.customer_id)
    again_ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body=f"Please refund $50.00 on order {number}"
    )
    advance(again_ticket.pk, model=model)
    (again,) = refund_calls(again_ticket)
    if again.status == CallStatus.AWAITING_CONFIRMATION:
        confirm(again_ticket, again)  # the customer presses Confirm
        advance(again_ticket.pk, model=model)
    again.refresh_from_db()
    return again


def test_a_refund_a_person_stopped_is_reviewed_when_asked_again_after_a_pseudonymised_move(tmp_path, sandbox, person):  # noqa: ANN001
    customer = make_customer()
    order_for(customer, "ORD-24010", 5000, sandbox)  # $50.00: under every threshold
    model = AsksForTheRefund("ORD-24010", 5000)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="I'd like my $50.00 back, it broke"
    )
    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="ORD-24010"
    )  # the answer to "which order?"
    again = stopped_moved_and_asked_again(tmp_path, ticket, model, person, "ORD-24010")
    stopped = refund_calls(ticket)[0]
    assert again.approval_required, (
        "a refund a person stopped was asked again after a (pseudonymised) move and is not sent to staff: "
        f"the stopped call now reads {stopped.arguments}; the new call is {again.status}, the provider paid "
        f"{[r['amount'] for r in paid(sandbox, Order.objects.get(number='ORD-24010'))]} unreviewed"
    )


@pytest.mark.parametrize("words", ["a person", "the ticket"])
def test_a_refund_a_person_stopped_is_reviewed_after_a_pseudonymised_move_when_the_customer_wrote_its_words(
    tmp_path,
    sandbox,
    person,
    words,  # noqa: ANN001
):
    """A customer who once wrote "a person" or "the ticket" (8+ characters, so withheld wherever the
    bundle repeats it) rewrote the run's outcome and the call's error, "a person took the ticket over",
    by which ``_stopped_before`` finds the stop: asked again after the move, the refund was paid unreviewed."""
    customer = make_customer()
    order_for(customer, "PX-5501", 5000, sandbox)
    model = AsksForTheRefund("PX-5501", 5000)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $50.00 on order PX-5501, it broke"
    )
    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body=words
    )
    again = stopped_moved_and_asked_again(tmp_path, ticket, model, person, "PX-5501")
    assert again.approval_required, (
        f"a refund a person stopped was asked again after a pseudonymised move and not sent to staff; the stopped "
        f"call's error reads {refund_calls(ticket)[0].error!r}, the provider paid "
        f"{[r['amount'] for r in paid(sandbox, Order.objects.get(number='PX-5501'))]} unreviewed"
    )
