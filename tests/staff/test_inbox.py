"""The staff inbox over HTTP: who may use it, the views, and every action through the status rules."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client
from django.urls import reverse

from agents.models import AgentRun, RunStatus
from staff import views as staff_views
from tests.conftest import make_customer, make_order
from tests.staff.conftest import make_support_staff
from tickets import presenters, selectors, services
from tickets.models import ActorKind, AuthorKind, Message, Ticket, TicketEvent, TicketStatus
from tickets.signals import ticket_needs_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def ticket(customer) -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Broken kettle", body="My kettle K-1 leaks.")
    return ticket


@pytest.fixture
def person(client: Client, agent_person) -> Client:  # noqa: ANN001
    client.force_login(agent_person)
    return client


@pytest.fixture
def rings() -> list[int]:
    """Each ticket_needs_agent signal rings the agent once."""
    seen: list[int] = []

    def count(sender: object, ticket_id: int, **kwargs: object) -> None:
        seen.append(ticket_id)

    ticket_needs_agent.connect(count, dispatch_uid="staff-test-rings")
    yield seen
    ticket_needs_agent.disconnect(dispatch_uid="staff-test-rings")


def _endpoints(ticket_id: int) -> list[tuple[str, str]]:
    gets = [reverse("staff:inbox")] + [reverse(f"staff:{name}", args=[ticket_id]) for name in ("ticket", "timeline")]
    posts = [
        reverse(f"staff:{name}", args=[ticket_id])
        for name in ("reply", "note", "take_over", "hand_back", "resolve", "close", "assign")
    ]
    return [("get", url) for url in gets] + [("post", url) for url in posts]


def test_every_staff_endpoint_sends_anonymous_visitors_to_the_login_page(client: Client, ticket: Ticket):
    for method, url in _endpoints(ticket.pk):
        response = getattr(client, method)(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/?next="), url
    assert ticket.events.count() == 2  # opened + the first message: nothing happened


def test_every_staff_endpoint_refuses_a_customer_with_403(client: Client, ticket: Ticket, customer):  # noqa: ANN001
    client.force_login(customer.user)
    for method, url in _endpoints(ticket.pk):
        response = getattr(client, method)(url, {"body": "hi", "client_msg_id": "x"} if method == "post" else None)
        assert response.status_code == 403, url
    assert Message.objects.filter(ticket=ticket).count() == 1
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN


def test_a_staff_user_without_the_inbox_permission_gets_403(client: Client, ticket: Ticket, django_user_model):  # noqa: ANN001
    plain = django_user_model.objects.create_user(username="intern", password="x", is_staff=True)
    client.force_login(plain)
    assert client.get(reverse("staff:inbox")).status_code == 403
    assert client.post(reverse("staff:take_over", args=[ticket.pk])).status_code == 403


def test_the_group_from_the_migration_opens_the_inbox_and_home_leads_there(person: Client):
    assert person.get("/").url == reverse("staff:inbox")
    page = person.get(reverse("staff:inbox"))
    assert page.status_code == 200
    assert "Needs a person" in page.content.decode()


def test_views_count_and_list_tickets_oldest_first(person: Client, agent_person, customer):  # noqa: ANN001
    older, _ = services.ticket_open(customer=customer, subject="Older", body="first")
    newer, _ = services.ticket_open(customer=customer, subject="Newer", body="second")
    waiting, _ = services.ticket_open(customer=customer, subject="Approval", body="third")
    done, _ = services.ticket_open(customer=customer, subject="Done", body="fourth")
    services.ticket_hand_to_person(ticket=older, reason="asked for a person")
    services.ticket_hand_to_person(ticket=newer, reason="asked for a person")
    services.ticket_transition(ticket=waiting, to_status=TicketStatus.PENDING_APPROVAL, actor_kind=ActorKind.SYSTEM)
    services.ticket_resolve(ticket=done, user=agent_person)
    services.ticket_take_over(ticket=newer, user=agent_person)

    page = person.get(reverse("staff:inbox") + "?view=needs_person").content.decode()
    assert [int(n) for n in re.findall(r'data-ticket-id="(\d+)"', page)] == [older.pk, newer.pk]
    counts = dict(re.findall(r'data-view-count="(\w+)">(\d+)<', page))
    assert counts == {"needs_person": "2", "mine": "1", "approval": "1", "open": "3", "rated": "0", "all": "4"}
    mine = person.get(reverse("staff:inbox") + "?view=mine").content.decode()
    assert f"#{newer.pk} Newer" in mine and f"#{older.pk} Older" not in mine


def test_search_by_ticket_id_order_number_name_and_email(person: Client):
    alice, bob = make_customer("alice"), make_customer("bob")
    make_order(alice, number="ORD-777")
    a, _ = services.ticket_open(customer=alice, subject="Alice's kettle", body="hello")
    b, _ = services.ticket_open(customer=bob, subject="Bob's mug", body="hello")

    def found(query: str) -> set[int]:
        page = person.get(reverse("staff:inbox"), {"view": "open", "q": query}).content.decode()
        return {int(n) for n in re.findall(r'data-ticket-id="(\d+)"', page)}

    assert found(str(b.pk)) == {b.pk}
    assert found(f"#{a.pk}") == {a.pk}
    assert found("ord-777") == {a.pk}
    assert found("Bob") == {b.pk}
    assert found("alice@example.test") == {a.pk}
    assert found("nobody-like-this") == set()


def test_filters_by_status_and_assignee(person: Client, agent_person, customer):  # noqa: ANN001
    mine, _ = services.ticket_open(customer=customer, subject="Mine", body="x")
    free, _ = services.ticket_open(customer=customer, subject="Free", body="y")
    services.ticket_take_over(ticket=mine, user=agent_person)

    def listed(**params: str) -> set[int]:
        page = person.get(reverse("staff:inbox"), {"view": "open", **params}).content.decode()
        return {int(n) for n in re.findall(r'data-ticket-id="(\d+)"', page)}

    assert listed(status=TicketStatus.WITH_HUMAN) == {mine.pk}
    assert listed(assignee="maria") == {mine.pk}
    assert listed(assignee="none") == {free.pk}


def test_every_ticket_of_a_view_is_on_a_page_and_the_pages_keep_the_search_and_filters(person: Client, monkeypatch):  # noqa: ANN001
    """The inbox listed at most 200 tickets, with no next page and no notice: the newest of a long view
    could be reached only by searching its number. It has pages, oldest first across them."""
    monkeypatch.setattr(staff_views, "INBOX_PAGE_SIZE", 2, raising=False)
    customer = make_customer()
    ids = []
    for n in range(5):
        ticket, _ = services.ticket_open(customer=customer, subject=f"Kettle {n}", body="Help", client_ref=f"k{n}")
        services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")
        ids.append(ticket.pk)
    services.ticket_open(customer=customer, subject="Toaster", body="Help", client_ref="t")  # not found by "Kettle"

    listed, link = [], reverse("staff:inbox") + "?view=needs_person&q=Kettle&status=with_human"
    while link:
        page = person.get(link)
        assert page.status_code == 200
        listed += [t.pk for t in page.context["tickets"]]
        found = re.search(r'href="([^"]*)" rel="next"', page.content.decode())
        link = found.group(1).replace("&amp;", "&") if found else ""
        if link:
            assert "q=Kettle" in link and "status=with_human" in link and "view=needs_person" in link
    assert listed == ids  # each once, oldest first
    assert "5 to 5 of 5" in page.content.decode()
    assert [
        t.pk for t in person.get(reverse("staff:inbox"), {"view": "needs_person", "page": "x"}).context["tickets"]
    ] == ids[:2]


def test_take_over_reply_and_hand_back_go_through_the_status_rules(
    person: Client,
    agent_person,
    ticket: Ticket,
    rings: list[int],
    django_capture_on_commit_callbacks,  # noqa: ANN001
):
    assert person.post(reverse("staff:take_over", args=[ticket.pk])).status_code == 302
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN and ticket.assignee == agent_person
    change = ticket.events.get(kind="status_changed", payload__to=TicketStatus.WITH_HUMAN)
    assert change.actor_kind == ActorKind.STAFF and change.actor_user == agent_person

    reply = person.post(
        reverse("staff:reply", args=[ticket.pk]), {"body": "Hi, I am Maria. Sending a new one.", "client_msg_id": "r1"}
    )
    assert reply.status_code == 302
    message = Message.objects.get(ticket=ticket, author_kind=AuthorKind.STAFF)
    assert message.is_public and message.author_user == agent_person
    # The customer's view names the person.
    items, _ = presenters.present_events(selectors.ticket_timeline(ticket=ticket, public_only=True))
    staff_items = [i for i in items if i.get("author") == AuthorKind.STAFF]
    assert [i["author_name"] for i in staff_items] == ["Maria Lopez"]
    # What the customer asked is answered by a person: the agent will not answer it again.
    assert not selectors.unanswered_messages(ticket_id=ticket.pk).exists()

    assert rings == []
    with django_capture_on_commit_callbacks(execute=True):
        assert person.post(reverse("staff:hand_back", args=[ticket.pk])).status_code == 302
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.OPEN and ticket.assignee is None
    assert rings == [ticket.pk]
    # A double click on "hand back" changes nothing more and rings nothing more.
    with django_capture_on_commit_callbacks(execute=True):
        person.post(reverse("staff:hand_back", args=[ticket.pk]))
    assert rings == [ticket.pk]
    assert ticket.events.filter(kind="status_changed", payload__to=TicketStatus.OPEN).count() == 1


def test_replying_on_a_ticket_the_agent_has_takes_it_over(person: Client, agent_person, ticket: Ticket):  # noqa: ANN001
    person.post(reverse("staff:reply", args=[ticket.pk]), {"body": "I'll handle this.", "client_msg_id": "r1"})
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN and ticket.assignee == agent_person


def test_a_double_posted_staff_reply_is_stored_once(person: Client, ticket: Ticket):
    form = {"body": "Your replacement ships today.", "client_msg_id": uuid.uuid4().hex}
    first = person.post(reverse("staff:reply", args=[ticket.pk]), form)
    second = person.post(reverse("staff:reply", args=[ticket.pk]), form)
    assert first.status_code == second.status_code == 302
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF).count() == 1
    assert TicketEvent.objects.filter(ticket=ticket, kind="message", actor_kind=ActorKind.STAFF).count() == 1


def test_a_reply_id_reused_for_other_text_is_refused_and_the_text_is_kept(person: Client, ticket: Ticket):
    person.post(reverse("staff:reply", args=[ticket.pk]), {"body": "first text", "client_msg_id": "same"})
    response = person.post(reverse("staff:reply", args=[ticket.pk]), {"body": "other text", "client_msg_id": "same"})
    assert response.status_code == 409
    assert "other text" in response.content.decode()  # the typed reply is not lost
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF).count() == 1


def test_an_empty_reply_is_refused_with_a_reason(person: Client, ticket: Ticket):
    response = person.post(reverse("staff:reply", args=[ticket.pk]), {"body": "   ", "client_msg_id": "e"})
    assert response.status_code == 400
    assert "cannot be empty" in response.content.decode()
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN


def test_an_internal_note_never_reaches_the_customer_page(person: Client, ticket: Ticket, customer):  # noqa: ANN001
    person.post(reverse("staff:note", args=[ticket.pk]), {"body": "VIP: refund without asking", "client_msg_id": "n1"})
    note = Message.objects.get(ticket=ticket, author_kind=AuthorKind.STAFF)
    assert not note.is_public
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN  # a note takes nothing over
    staff_page = person.get(reverse("staff:ticket", args=[ticket.pk])).content.decode()
    assert "VIP: refund without asking" in staff_page and "internal, not shown to the customer" in staff_page

    customer_client = Client()
    customer_client.force_login(customer.user)
    chat = customer_client.get(reverse("tickets:chat", args=[ticket.pk])).content.decode()
    assert "VIP" not in chat
    items, _ = presenters.present_events(selectors.ticket_timeline(ticket=ticket, public_only=True))
    assert all("VIP" not in str(item) for item in items)


def test_resolve_and_close_are_recorded_and_a_closed_ticket_refuses_more(person: Client, ticket: Ticket):
    assert person.post(reverse("staff:resolve", args=[ticket.pk])).status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.RESOLVED
    assert person.post(reverse("staff:close", args=[ticket.pk])).status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.CLOSED
    refused = person.post(reverse("staff:reply", args=[ticket.pk]), {"body": "one more", "client_msg_id": "late"})
    assert refused.status_code == 409 and "closed" in refused.content.decode()
    assert person.post(reverse("staff:hand_back", args=[ticket.pk])).status_code == 409
    assert not Message.objects.filter(ticket=ticket, author_kind=AuthorKind.STAFF).exists()
    actors = set(ticket.events.filter(kind="status_changed").values_list("actor_kind", flat=True))
    assert actors == {ActorKind.STAFF}


def test_assign_to_someone_and_back_to_nobody(person: Client, ticket: Ticket):
    colleague = make_support_staff("li")
    person.post(reverse("staff:assign", args=[ticket.pk]), {"assignee": "li"})
    assert Ticket.objects.get(pk=ticket.pk).assignee == colleague
    refused = person.post(reverse("staff:assign", args=[ticket.pk]), {"assignee": "ghost"})
    assert refused.status_code == 400 and "ghost" in refused.content.decode()
    person.post(reverse("staff:assign", args=[ticket.pk]), {"assignee": ""})
    assert Ticket.objects.get(pk=ticket.pk).assignee is None
    assert ticket.events.filter(kind="assigned").count() == 2


def test_actions_need_post(person: Client, ticket: Ticket):
    assert person.get(reverse("staff:take_over", args=[ticket.pk])).status_code == 405
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN


def test_the_timeline_endpoint_returns_what_is_new_with_the_status(person: Client, agent_person, ticket: Ticket):  # noqa: ANN001
    last = ticket.events.order_by("-seq").first().seq
    services.staff_note(ticket=ticket, user=agent_person, body="Checking the warehouse", client_msg_id="n")
    data = person.get(reverse("staff:timeline", args=[ticket.pk]), {"after": last}).json()
    assert "Checking the warehouse" in data["html"] and "My kettle" not in data["html"]
    assert data["last_seq"] == last + 1 and data["status"] == TicketStatus.OPEN
    assert "No orders." in data["side_html"]
    assert person.get(reverse("staff:timeline", args=[ticket.pk]), {"after": "x"}).status_code == 400


def test_trace_panel_shows_runs_steps_and_calls(person: Client, ticket: Ticket):
    AgentRun.objects.create(ticket=ticket, status=RunStatus.COMPLETED, model_name="offline", prompt_tokens=12)
    page = person.get(reverse("staff:ticket", args=[ticket.pk])).content.decode()
    assert "Agent trace" in page and "offline" in page and "Tokens: 12 prompt" in page
