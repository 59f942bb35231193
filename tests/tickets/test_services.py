from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from tests.conftest import make_customer
from tickets import services
from tickets.models import ActorKind, AuthorKind, Message, Ticket, TicketEvent, TicketStatus


def open_ticket(customer, body: str = "Where is my order?") -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Order question", body=body)
    return ticket


def test_opening_a_ticket_records_the_first_message_and_timeline(customer):
    ticket = open_ticket(customer)

    assert list(ticket.messages.values_list("author_kind", "body")) == [("customer", "Where is my order?")]
    assert list(ticket.events.order_by("seq").values_list("seq", "kind")) == [(1, "ticket_opened"), (2, "message")]


def test_illegal_status_transition_is_refused_with_a_clear_error(customer):
    ticket = open_ticket(customer)
    services.ticket_transition(ticket=ticket, to_status=TicketStatus.CLOSED, actor_kind=ActorKind.SYSTEM)

    with pytest.raises(services.InvalidTransition) as excinfo:
        services.ticket_transition(ticket=ticket, to_status=TicketStatus.OPEN, actor_kind=ActorKind.SYSTEM)

    assert f"Ticket #{ticket.pk} cannot go from closed to open" in excinfo.value.message
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CLOSED
    assert not ticket.events.filter(kind="status_changed", payload__to="open").exists()


def test_allowed_transition_is_recorded_on_the_timeline(customer):
    ticket = open_ticket(customer)

    services.ticket_transition(ticket=ticket, to_status=TicketStatus.WITH_HUMAN, actor_kind=ActorKind.SYSTEM)

    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    event = ticket.events.get(kind="status_changed")
    assert event.payload["from"] == "open" and event.payload["to"] == "with_human"


def test_unknown_status_is_refused(customer):
    ticket = open_ticket(customer)
    with pytest.raises(services.InvalidTransition, match="not a ticket status"):
        services.ticket_transition(ticket=ticket, to_status="teleported", actor_kind=ActorKind.SYSTEM)


def test_repeated_client_message_id_returns_the_original_message(customer):
    ticket = open_ticket(customer)

    first, created_first = services.message_post(
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="Any news?", client_msg_id="c-1"
    )
    again, created_again = services.message_post(
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="Any news?", client_msg_id="c-1"
    )

    assert created_first is True and created_again is False
    assert again.pk == first.pk
    assert Message.objects.filter(ticket=ticket, client_msg_id="c-1").count() == 1
    assert ticket.events.filter(kind="message").count() == 2  # the opening message and this one, once


def test_a_message_whose_id_another_request_stored_meanwhile_returns_that_message(customer):
    # The caller looked and found no message with this ID; another request stored one since
    # (the web's send endpoint passes unseen_client_msg_id after its own look).
    ticket = open_ticket(customer)
    first, _ = services.message_post(
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="Any news?", client_msg_id="c-3"
    )
    events = ticket.events.count()

    again, created = services.message_post(
        ticket=ticket,
        author_kind=AuthorKind.CUSTOMER,
        author_user=customer.user,
        body="Any news?",
        client_msg_id="c-3",
        unseen_client_msg_id=True,
    )

    assert created is False and again.pk == first.pk
    assert Message.objects.filter(ticket=ticket, client_msg_id="c-3").count() == 1
    assert ticket.events.count() == events  # the losing insert's event went with its rollback


def test_client_message_id_reused_for_other_text_is_refused(customer):
    ticket = open_ticket(customer)
    services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="One", client_msg_id="c-2")

    with pytest.raises(services.MessageConflict):
        services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Two", client_msg_id="c-2")
    assert list(Message.objects.filter(client_msg_id="c-2").values_list("body", flat=True)) == ["One"]


@pytest.mark.parametrize(("body", "code"), [("   ", "empty"), ("x" * (services.MESSAGE_MAX_CHARS + 1), "too_long")])
def test_empty_or_oversized_message_is_refused_and_nothing_is_written(customer, body, code):
    ticket = open_ticket(customer)
    before = (Message.objects.count(), TicketEvent.objects.count())

    with pytest.raises(ValidationError) as excinfo:
        services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=body)

    assert excinfo.value.code == code
    assert (Message.objects.count(), TicketEvent.objects.count()) == before


def test_retried_ticket_open_with_the_same_reference_returns_the_same_ticket(customer):
    first, created = services.ticket_open(customer=customer, subject="Hi", body="Hello", client_ref="tab-1")
    again, created_again = services.ticket_open(customer=customer, subject="Hi", body="Hello", client_ref="tab-1")

    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert Ticket.objects.filter(customer=customer).count() == 1


def test_a_ticket_whose_reference_another_request_used_meanwhile_returns_that_ticket(customer):
    # The caller looked and found no ticket with this reference; another request opened one since
    # (the web's new-ticket form passes unseen_client_ref after its own look).
    first, _ = services.ticket_open(customer=customer, subject="Hi", body="Hello", client_ref="tab-2")

    again, created = services.ticket_open(
        customer=customer, subject="Hi", body="Hello", client_ref="tab-2", unseen_client_ref=True
    )

    assert created is False and again.pk == first.pk
    assert Ticket.objects.filter(customer=customer).count() == 1
    assert Message.objects.filter(ticket__customer=customer).count() == 1


def test_customer_message_reopens_a_ticket_waiting_on_them(customer):
    ticket = open_ticket(customer)
    services.ticket_transition(ticket=ticket, to_status=TicketStatus.WAITING_ON_CUSTOMER, actor_kind=ActorKind.AGENT)

    services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Still broken")

    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.OPEN


@pytest.mark.django_db(transaction=True)
def test_timeline_sequence_numbers_are_unique_and_gap_free_under_concurrent_writers():
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Race", body="Go")
    start_seq = Ticket.objects.get(pk=ticket.pk).last_event_seq
    threads_count, per_thread = 8, 15
    barrier = threading.Barrier(threads_count)
    errors: list[BaseException] = []
    backends: set[int] = set()

    def writer(index: int) -> None:
        try:
            with connection.cursor() as cursor:  # each thread has its own real connection
                cursor.execute("SELECT pg_backend_pid()")
                backends.add(cursor.fetchone()[0])
            barrier.wait()
            for i in range(per_thread):
                if i % 5 == 4:
                    # A writer that rolls back must give its number back.
                    try:
                        with transaction.atomic():
                            services.event_append(ticket=ticket.pk, kind="probe", actor_kind=ActorKind.SYSTEM)
                            raise RuntimeError("roll back")
                    except RuntimeError:
                        pass
                else:
                    services.event_append(
                        ticket=ticket.pk, kind="probe", actor_kind=ActorKind.SYSTEM, payload={"w": index, "i": i}
                    )
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert len(backends) == threads_count
    committed = threads_count * (per_thread - per_thread // 5)
    seqs = list(TicketEvent.objects.filter(ticket=ticket).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, start_seq + committed + 1))
    assert Ticket.objects.get(pk=ticket.pk).last_event_seq == start_seq + committed


def test_a_message_at_the_limit_with_line_breaks_sent_as_crlf_is_taken_with_one_character_a_break(customer):
    """A form posts the box's line breaks as CRLF; the box counted each as one character. A message
    the box took whole (4,000 characters with breaks) was refused as "this one has 4,099"."""
    ticket = open_ticket(customer)
    lines = ["x" * 39] * 100
    as_typed = "\n".join(lines) + "y"  # 100 lines of 39, 99 breaks and a last letter: 4,000 in the box
    assert len(as_typed) == services.MESSAGE_MAX_CHARS

    services.message_post(
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=as_typed.replace("\n", "\r\n"), client_msg_id="c-crlf"
    )
    services.message_post(  # the same send retried: the same message, not a conflict
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, body=as_typed.replace("\n", "\r\n"), client_msg_id="c-crlf"
    )

    assert list(Message.objects.filter(client_msg_id="c-crlf").values_list("body", flat=True)) == [as_typed]
