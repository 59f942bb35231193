"""The lease knows whether anyone else has written on the ticket's timeline since its worker read it.

Each fenced transaction numbers its timeline events in the statement that runs the fence, and
gets the numbers back: a gap between the number the worker last knew and its own events' first
is someone else's writes (a customer's message, a person's reply or take-over, a decision). The
loop asks the ledger again only then (DESIGN.md, invariant 12), so these answers must never say
"alone" when someone else wrote; saying "not alone" when no one did only costs a read.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from agents.lease import lease_acquire
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import ActorKind, AuthorKind, Ticket

pytestmark = pytest.mark.django_db(transaction=True)


def last_seq(ticket: Ticket) -> int:
    return Ticket.objects.values_list("last_event_seq", flat=True).get(pk=ticket.pk)


def own_event(lease: Any, ticket: Ticket, n: int = 1) -> None:
    with lease.guard():
        for _ in range(n):
            ticket_services.event_append(ticket=ticket, kind="agent_note", actor_kind=ActorKind.AGENT)


def customer_writes(ticket: Ticket, text: str) -> None:
    ticket_services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=ticket.customer.user, body=text,
        client_msg_id=text,
    )  # fmt: skip


@pytest.fixture
def ticket_and_lease() -> Any:
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Seen", body="hello")
    lease = lease_acquire(ticket_id=ticket.pk, owner="worker-under-test")
    assert lease is not None
    yield ticket, lease
    if lease.locked:
        lease.unlock()


def test_not_alone_until_the_ticket_is_read(ticket_and_lease) -> None:  # noqa: ANN001
    ticket, lease = ticket_and_lease
    assert not lease.alone_since_read()
    own_event(lease, ticket)
    assert not lease.alone_since_read(), "a lease that never read the ticket cannot know who wrote"


def test_its_own_writes_leave_it_alone(ticket_and_lease) -> None:  # noqa: ANN001
    ticket, lease = ticket_and_lease
    lease.watch(last_seq(ticket))
    own_event(lease, ticket, n=3)
    own_event(lease, ticket)
    with lease.guard():
        pass  # a transaction with no event moves no number
    assert lease.seq == last_seq(ticket)
    assert lease.alone_since_read()
    assert lease.alone_since_read(last_seq(ticket))


def test_someone_elses_write_between_its_own_is_seen_by_its_next_commit(ticket_and_lease) -> None:  # noqa: ANN001
    ticket, lease = ticket_and_lease
    lease.watch(last_seq(ticket))
    own_event(lease, ticket)
    customer_writes(ticket, "are you there?")
    own_event(lease, ticket)
    assert not lease.alone_since_read()
    own_event(lease, ticket)
    assert not lease.alone_since_read(last_seq(ticket)), "once seen, it stays seen for the pass"


def test_someone_elses_write_after_its_last_commit_is_seen_by_the_number_read_now(ticket_and_lease) -> None:  # noqa: ANN001
    ticket, lease = ticket_and_lease
    lease.watch(last_seq(ticket))
    own_event(lease, ticket)
    customer_writes(ticket, "hello again")
    # Its own commits have not seen it yet; the ticket's number, read now, has.
    assert not lease.alone_since_read(last_seq(ticket))


def test_a_write_before_the_read_is_not_counted(ticket_and_lease) -> None:  # noqa: ANN001
    ticket, lease = ticket_and_lease
    customer_writes(ticket, "written before the worker read the ticket")
    lease.watch(last_seq(ticket))
    own_event(lease, ticket)
    assert lease.alone_since_read(last_seq(ticket))


def test_a_guard_inside_a_transaction_that_rolls_back_knows_no_more(ticket_and_lease) -> None:  # noqa: ANN001
    ticket, lease = ticket_and_lease
    lease.watch(last_seq(ticket))
    with pytest.raises(RuntimeError), transaction.atomic():
        own_event(lease, ticket, n=2)  # numbered 2 and 3 ... then rolled back with the caller's transaction
        raise RuntimeError("the caller's transaction fails")
    customer_writes(ticket, "one")  # someone else takes numbers 2 and 3
    with transaction.atomic():
        ticket_services.event_append(ticket=ticket, kind="note", actor_kind=ActorKind.SYSTEM)
    own_event(lease, ticket)
    assert not lease.alone_since_read(), "numbers from a rolled-back transaction were trusted"
