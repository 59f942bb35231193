"""My tickets (the last message, the unread marker) and the chat's date separators."""

from __future__ import annotations

import asyncio
import html as html_text
import re
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tests.conftest import make_customer
from tests.tickets.test_consumer import session_cookie, socket, until_ready
from tickets import presenters, services
from tickets.models import AuthorKind, Customer, Ticket, TicketEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(client, customer) -> Client:  # noqa: ANN001
    client.force_login(customer.user)
    return client


def open_ticket(customer: Customer, subject: str = "Kettle", body: str = "Where is my kettle?") -> Ticket:
    ticket, _ = services.ticket_open(customer=customer, subject=subject, body=body)
    return ticket


def _rows(client: Client) -> list[tuple[str, bool, str]]:
    """My tickets as the customer reads them: (subject, marked unread, the row's whole text)."""
    html = client.get(reverse("tickets:list")).content.decode()
    out = []
    for classes, row in re.findall(r'<a href="/tickets/\d+/" class="(ticket-row[^"]*)">(.*?)</a>', html, re.S):
        subject = re.search(r'class="ticket-subject">(?:.*?New reply: </span>)?([^<]*)<', row, re.S)[1]
        text = html_text.unescape(" ".join(re.sub(r"<[^>]+>", " ", row).split()))
        out.append((subject, "unread" in classes.split(), text))
    return out


def rows(client: Client) -> dict[str, str]:
    return {subject: text for subject, _, text in _rows(client)}


def unread(client: Client) -> set[str]:
    """The subjects marked unread, each checked to say so in words too (for screen readers)."""
    marked = {subject for subject, is_unread, _ in _rows(client) if is_unread}
    for _subject, is_unread, text in _rows(client):
        assert ("New reply:" in text) == is_unread, text
    return marked


# --- the last message ---------------------------------------------------------------------


def test_my_tickets_shows_the_last_public_message_with_who_wrote_it(signed_in, customer, django_user_model):
    kettle = open_ticket(customer, "Kettle", "Where is my kettle?")
    open_ticket(customer, "Mug", "My mug\narrived   chipped")
    toaster = open_ticket(customer, "Toaster", "Toaster?")
    services.message_post(ticket=kettle, author_kind=AuthorKind.AGENT, body="It ships today.")
    services.message_post(ticket=kettle, author_kind=AuthorKind.STAFF, body="Internal: check stock", is_public=False)
    person = django_user_model.objects.create_user(username="maria", first_name="Maria", last_name="Lopez")
    services.staff_reply(ticket=toaster, user=person, body="I'm sending a new one. " + "x" * 200, client_msg_id="r1")

    shown = rows(signed_in)

    assert "Support assistant: It ships today." in shown["Kettle"]
    assert "Internal" not in shown["Kettle"]
    assert "You: My mug arrived chipped" in shown["Mug"]
    assert "Maria Lopez: I'm sending a new one. xxx" in shown["Toaster"]
    assert shown["Toaster"].count("x") < 100 and "…" in shown["Toaster"]  # cut short
    assert "Waiting for your reply" in shown["Toaster"] or "With a person from our team" in shown["Toaster"]


def test_my_tickets_reads_previews_and_markers_in_the_same_number_of_queries_for_any_number_of_tickets(
    signed_in, customer
):
    def queries() -> int:
        from django.db import connection

        with CaptureQueriesContext(connection) as captured:
            assert signed_in.get(reverse("tickets:list")).status_code == 200
        return len(captured)

    ticket = open_ticket(customer, "One")
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="Answer")
    one = queries()
    for n in range(5):
        more = open_ticket(customer, f"More {n}")
        services.message_post(ticket=more, author_kind=AuthorKind.AGENT, body=f"Answer {n}")

    assert queries() == one
    assert len(rows(signed_in)) == 6


# --- unread -------------------------------------------------------------------------------


def test_a_reply_is_unread_until_the_customer_opens_the_chat(signed_in, customer):
    ticket = open_ticket(customer, "Kettle")
    assert unread(signed_in) == set()  # the customer's own message is not news to them

    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="It ships today.")
    assert unread(signed_in) == {"Kettle"}

    signed_in.get(reverse("tickets:chat", args=[ticket.pk]))
    assert unread(signed_in) == set()
    ticket.refresh_from_db()
    assert ticket.customer_seen_seq == ticket.last_event_seq


def test_internal_notes_and_the_customers_own_messages_never_make_a_ticket_unread(signed_in, customer):
    ticket = open_ticket(customer, "Kettle")
    services.message_post(ticket=ticket, author_kind=AuthorKind.STAFF, body="Internal: check stock", is_public=False)
    services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="Hello?")

    assert unread(signed_in) == set()


def test_what_staff_do_out_of_the_customers_sight_leaves_my_tickets_as_it_was(signed_in, customer):
    """An internal note, an assignment: the customer's list neither moves the ticket up nor says it
    was "updated just now", as if something had been said to them that their chat does not show."""
    from tests.staff.conftest import make_support_staff

    kettle, mug = open_ticket(customer, "Kettle"), open_ticket(customer, "Mug")
    for ticket, hours in ((kettle, 3), (mug, 2)):
        earlier = timezone.now() - timedelta(hours=hours)
        TicketEvent.objects.filter(ticket=ticket).update(created_at=earlier)
        Ticket.objects.filter(pk=ticket.pk).update(created_at=earlier, updated_at=earlier)
    before = _rows(signed_in)
    assert [subject for subject, _, _ in before] == ["Mug", "Kettle"]

    person = make_support_staff("maria")
    services.staff_note(ticket=kettle, user=person, body="Refunded twice before: check", client_msg_id="n1")
    services.ticket_assign_to(ticket=kettle, assignee=person, user=person)

    assert _rows(signed_in) == before


def test_only_the_ticket_with_a_new_reply_is_marked(signed_in, customer):
    read, fresh = open_ticket(customer, "Read"), open_ticket(customer, "Fresh")
    services.message_post(ticket=read, author_kind=AuthorKind.AGENT, body="Old answer")
    signed_in.get(reverse("tickets:chat", args=[read.pk]))
    services.message_post(ticket=fresh, author_kind=AuthorKind.AGENT, body="New answer")

    assert unread(signed_in) == {"Fresh"}


def test_the_seen_mark_only_moves_forward_and_never_past_the_timeline(customer):
    ticket = open_ticket(customer)
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="Answer")
    ticket.refresh_from_db()
    end = ticket.last_event_seq

    assert services.ticket_mark_seen(ticket=ticket, seq=end + 50) is True
    assert Ticket.objects.get(pk=ticket.pk).customer_seen_seq == end
    assert services.ticket_mark_seen(ticket=ticket, seq=1) is False
    assert services.ticket_mark_seen(ticket=ticket, seq=end) is False
    assert Ticket.objects.get(pk=ticket.pk).customer_seen_seq == end


def test_opening_the_chat_changes_nothing_the_staff_or_the_agent_see(signed_in, customer):
    ticket = open_ticket(customer)
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="Answer")
    ticket.refresh_from_db()
    before = (ticket.updated_at, ticket.last_event_seq)

    signed_in.get(reverse("tickets:chat", args=[ticket.pk]))

    ticket.refresh_from_db()
    assert (ticket.updated_at, ticket.last_event_seq) == before


def undelivered_reply(ticket: Ticket) -> None:
    seq = Ticket.objects.get(pk=ticket.pk).last_event_seq + 1
    Ticket.objects.filter(pk=ticket.pk).update(last_event_seq=seq)
    TicketEvent.objects.create(
        ticket=ticket, seq=seq, kind="message", actor_kind="agent", is_public=True,
        payload={"author_kind": "agent", "body": "Not delivered yet"},
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_replies_the_open_chat_shows_are_marked_seen_through_its_socket_never_past_what_it_sent(customer):
    ticket = open_ticket(customer)
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="It ships today.")
    headers = session_cookie(customer)
    stranger_headers = session_cookie(make_customer())

    async def seen_seq() -> int:
        return (await database_sync_to_async(Ticket.objects.get)(pk=ticket.pk)).customer_seen_seq

    async def scenario() -> None:
        ws = socket(ticket.pk, after=0, headers=headers)
        await ws.connect()
        frames = await until_ready(ws)
        sent = max(f["seq"] for f in frames)
        # A reply this socket has not delivered yet (written without ringing its doorbell).
        await database_sync_to_async(undelivered_reply)(ticket)
        await ws.send_json_to({"type": "seen", "seq": sent + 1000})  # more than it was sent: clamped
        await asyncio.sleep(0.3)
        assert await seen_seq() == sent
        await ws.send_json_to({"type": "seen", "seq": 1})  # backwards: ignored
        assert await ws.receive_nothing(timeout=0.3)
        await ws.send_json_to({"type": "seen", "seq": "all"})  # not a number: refused, with the reason
        assert "whole number" in (await ws.receive_json_from(timeout=5))["error"]
        assert await seen_seq() == sent
        await ws.disconnect()
        # Another customer's socket is refused before it can mark anything.
        intruder = socket(ticket.pk, after=0, headers=stranger_headers)
        await intruder.connect()
        assert (await intruder.receive_output(timeout=5))["code"] == 4404

    Ticket.objects.filter(pk=ticket.pk).update(customer_seen_seq=0)
    async_to_sync(scenario)()


# --- date separators ------------------------------------------------------------------------


def test_day_labels_say_today_yesterday_or_the_date():
    now = timezone.now()
    assert presenters.day_label(now, now=now) == "Today"
    assert presenters.day_label(now - timedelta(days=1), now=now) == "Yesterday"
    older = now - timedelta(days=9)
    assert presenters.day_label(older, now=now) == timezone.localdate(older).strftime("%B %-d, %Y")


def test_the_chat_page_separates_messages_of_different_days(signed_in, customer):
    ticket = open_ticket(customer, "Kettle", "Written last week")
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="Answered last week")
    services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="Yesterday's")
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="Also yesterday")
    services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="Today's")
    now = timezone.now()
    week_ago, yesterday = now - timedelta(days=7), now - timedelta(days=1)
    events = list(TicketEvent.objects.filter(ticket=ticket).order_by("seq"))
    for event in events:
        body = event.payload.get("body", "")
        when = week_ago if "last week" in body else yesterday if "esterday" in body else now
        if event.kind != "message":
            when = week_ago  # ticket_opened and the status changes of the first turn
        TicketEvent.objects.filter(pk=event.pk).update(created_at=when)

    html = signed_in.get(reverse("tickets:chat", args=[ticket.pk])).content.decode()
    log = html[html.index('id="chat-log"') : html.index("</ol>", html.index('id="chat-log"'))]
    order = re.findall(r'class="day-separator"[^>]*><span>([^<]*)</span>|<div class="bubble"[^>]*>([^<]*)</div>', log)
    sequence = [html_text.unescape(day or text) for day, text in order]

    week_label = timezone.localdate(week_ago).strftime("%B %-d, %Y")
    assert sequence == [
        week_label,
        "Written last week",
        "Answered last week",
        "Yesterday",
        "Yesterday's",
        "Also yesterday",
        "Today",
        "Today's",
    ]
    separators = re.findall(r'<li class="day-separator" data-seq="(\d+)" data-day="([\d-]+)">', log)
    assert [day for _, day in separators] == [
        timezone.localdate(week_ago).isoformat(),
        timezone.localdate(yesterday).isoformat(),
        timezone.localdate(now).isoformat(),
    ]
