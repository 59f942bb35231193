"""The customer's pages and the send endpoint, over HTTP with Django's test client."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.workers import purge_broker
from tickets import presenters, services
from tickets.models import ActorKind, AuthorKind, Message, Ticket, TicketEvent, TicketStatus
from tickets.signals import ticket_needs_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(client, customer) -> Client:  # noqa: ANN001
    client.force_login(customer.user)
    return client


@pytest.fixture
def ticket(customer) -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    return ticket


@pytest.fixture
def staff_user(django_user_model):  # noqa: ANN001
    return django_user_model.objects.create_user(username="sam", password="pw-for-tests-123", is_staff=True)


@pytest.fixture
def doorbells():  # noqa: ANN201
    """Counts ticket_needs_agent signals (each one rings the agent)."""
    rung: list[int] = []

    def count(sender: object, ticket_id: int, **kwargs: object) -> None:
        rung.append(ticket_id)

    ticket_needs_agent.connect(count, dispatch_uid="test-doorbell-counter")
    yield rung
    ticket_needs_agent.disconnect(dispatch_uid="test-doorbell-counter")
    purge_broker()  # the real receiver queued advance_ticket for tickets this test rolls back


def send(client: Client, ticket: Ticket, body: str, client_msg_id: str = "m-1"):  # noqa: ANN201
    return client.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        data=json.dumps({"client_msg_id": client_msg_id, "body": body}),
        content_type="application/json",
    )


def text_of(html: bytes) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html.decode()))


# --- the front door --------------------------------------------------------------------


def test_home_sends_an_anonymous_visitor_to_sign_in(client):
    response = client.get("/")
    assert response.status_code == 302 and response.url == reverse("login")


def test_home_sends_a_customer_to_their_tickets(signed_in):
    response = signed_in.get("/")
    assert response.status_code == 302 and response.url == reverse("tickets:list")


def test_home_sends_staff_to_the_approvals_dashboard(client, staff_user):
    client.force_login(staff_user)
    response = client.get("/")
    assert response.status_code == 302 and response.url == "/staff/approvals/"


def test_my_tickets_asks_an_anonymous_visitor_to_sign_in(client):
    response = client.get(reverse("tickets:list"))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


# --- my tickets -------------------------------------------------------------------------


def test_my_tickets_lists_my_tickets_with_their_status_and_not_anyone_elses(signed_in, customer, other_customer):
    mine, _ = services.ticket_open(customer=customer, subject="Broken mug", body="It arrived broken")
    services.ticket_transition(ticket=mine, to_status=TicketStatus.PENDING_APPROVAL, actor_kind=ActorKind.SYSTEM)
    services.ticket_open(customer=other_customer, subject="Someone else's grinder", body="Hello")

    response = signed_in.get(reverse("tickets:list"))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Broken mug" in html
    assert "Someone else" not in html
    assert re.search(r'class="badge pending_approval">Under review by our team<', html)
    assert reverse("tickets:chat", args=[mine.pk]) in html


@pytest.mark.parametrize("page", ["tickets:list", "tickets:new"])
def test_staff_user_without_a_customer_profile_gets_404_on_customer_pages(client, staff_user, page):
    client.force_login(staff_user)
    assert client.get(reverse(page)).status_code == 404


def test_staff_user_without_a_customer_profile_gets_404_on_a_customers_chat_and_send(client, staff_user, ticket):
    client.force_login(staff_user)
    assert client.get(reverse("tickets:chat", args=[ticket.pk])).status_code == 404
    assert send(client, ticket, "Hello from staff").status_code == 404
    assert not Message.objects.filter(body="Hello from staff").exists()


# --- opening a ticket ---------------------------------------------------------------------


def test_new_ticket_form_carries_a_fresh_client_ref_each_time_it_is_shown(signed_in):
    refs = [
        re.search(r'name="client_ref" value="([0-9a-f]+)"', signed_in.get(reverse("tickets:new")).content.decode())[1]
        for _ in range(2)
    ]
    assert refs[0] != refs[1]


def test_opening_a_ticket_redirects_to_its_chat(signed_in, customer):
    response = signed_in.post(
        reverse("tickets:new"), {"subject": "", "body": "Where is my order A-1?", "client_ref": "form-1"}
    )

    ticket = Ticket.objects.get(customer=customer)
    assert response.status_code == 302 and response.url == reverse("tickets:chat", args=[ticket.pk])
    assert ticket.subject == "Where is my order A-1?"
    assert list(ticket.messages.values_list("author_kind", "body")) == [("customer", "Where is my order A-1?")]


def test_submitting_the_same_new_ticket_form_twice_opens_one_ticket(signed_in, customer):
    form = {"subject": "Lid", "body": "The lid is missing", "client_ref": "form-twice"}

    first = signed_in.post(reverse("tickets:new"), form)
    second = signed_in.post(reverse("tickets:new"), form)

    assert Ticket.objects.filter(customer=customer).count() == 1
    assert Message.objects.filter(ticket__customer=customer).count() == 1
    assert first.url == second.url


def test_a_form_reference_too_long_to_key_the_first_message_is_refused_not_cut_short(signed_in, customer):
    first = signed_in.post(reverse("tickets:new"), {"subject": "Lid", "body": "Lid missing", "client_ref": "r" * 96})
    second = signed_in.post(reverse("tickets:new"), {"subject": "Cup", "body": "Cup broken", "client_ref": "r" * 97})

    assert (first.status_code, second.status_code) == (400, 400)
    assert "reference is longer than 95 characters; send it again" in first.content.decode()
    assert "Lid missing" in first.content.decode()  # the customer's words are still in the form
    assert not Ticket.objects.filter(customer=customer).exists()


def test_a_long_form_reference_opens_one_ticket_with_its_first_message(signed_in, customer):
    form = {"subject": "Lid", "body": "The lid is missing", "client_ref": "r" * 95}

    first = signed_in.post(reverse("tickets:new"), form)
    second = signed_in.post(reverse("tickets:new"), form)

    assert first.status_code == 302 and first.url == second.url
    assert Ticket.objects.filter(customer=customer).count() == 1
    assert list(Message.objects.filter(ticket__customer=customer).values_list("body", flat=True)) == [
        "The lid is missing"
    ]


def test_opening_a_ticket_looks_its_reference_up_once_and_its_first_message_not_at_all(signed_in, customer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    form = {"subject": "Lid", "body": "The lid is missing", "client_ref": "form-count"}
    with CaptureQueriesContext(connection) as queries:
        response = signed_in.post(reverse("tickets:new"), form)

    assert response.status_code == 302 and Ticket.objects.filter(client_ref="form-count").count() == 1
    reads = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT")]
    # The form's reference is looked for once; the first message of a ticket this request opens
    # cannot exist yet, so its client message ID is not looked for.
    assert len([s for s in reads if "client_ref" in s.split("WHERE")[-1]]) == 1
    assert [s for s in reads if "client_msg_id" in s.split("WHERE")[-1]] == []


def test_opening_a_ticket_reads_the_signed_in_user_once(signed_in, customer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    form = {"subject": "Lid", "body": "The lid is missing", "client_ref": "form-user"}
    with CaptureQueriesContext(connection) as queries:
        response = signed_in.post(reverse("tickets:new"), form)

    assert response.status_code == 302
    opened = Ticket.objects.get(client_ref="form-user")
    assert set(opened.events.values_list("actor_user", flat=True)) == {customer.user.pk}
    assert opened.messages.get().author_user == customer.user
    # Read with the session; the customer's own login, who opens the ticket and writes its first
    # message, is that same user, not read again.
    users = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('SELECT "auth_user"')]
    assert len(users) == 1, users


def test_a_new_ticket_without_a_message_is_refused_with_the_reason(signed_in, customer):
    response = signed_in.post(reverse("tickets:new"), {"subject": "Hi", "body": "   ", "client_ref": "form-empty"})

    assert response.status_code == 400
    assert "A message cannot be empty." in response.content.decode()
    assert 'value="form-empty"' in response.content.decode()  # the retry keeps the form's reference
    assert not Ticket.objects.filter(customer=customer).exists()


# --- the chat page ----------------------------------------------------------------------------


def test_chat_page_shows_the_conversation_in_the_customers_words(signed_in, ticket):
    services.event_append(
        ticket=ticket,
        kind="tool_call_started",
        actor_kind=ActorKind.AGENT,
        payload={"tool": "lookup_order", "label": "Looking up your order"},
        is_public=True,
    )
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="Your kettle ships today.")
    services.message_post(ticket=ticket, author_kind=AuthorKind.STAFF, body="Internal: VIP customer", is_public=False)
    services.ticket_transition(ticket=ticket, to_status=TicketStatus.WAITING_ON_CUSTOMER, actor_kind=ActorKind.AGENT)

    response = signed_in.get(reverse("tickets:chat", args=[ticket.pk]))

    assert response.status_code == 200
    text = text_of(response.content)
    assert "Where is my kettle?" in text
    assert "Looking up your order" in text
    assert "Your kettle ships today." in text
    assert "Internal" not in text and "lookup_order" not in text
    assert 'id="chat-status-text">Waiting for your reply<' in response.content.decode()
    config = json.loads(
        re.search(r'id="chat-config" type="application/json">(.*?)</script>', response.content.decode())[1]
    )
    assert config["afterSeq"] == ticket.events.order_by("-seq").first().seq


def test_chat_page_shows_approval_and_refund_labels_as_they_are_recorded(signed_in, ticket):
    for kind, payload in [
        ("approval_requested", {"label": "Refund of $49.99 sent for review"}),
        ("approval_decided", {"decision": "approved", "label": "Refund of $49.99 approved"}),
        ("refund_succeeded", {"label": "Refund of $49.99 issued"}),
        ("approval_decided", {"decision": "rejected"}),
    ]:
        services.event_append(ticket=ticket, kind=kind, actor_kind=ActorKind.STAFF, payload=payload, is_public=True)

    text = text_of(signed_in.get(reverse("tickets:chat", args=[ticket.pk])).content)

    assert "Refund of $49.99 sent for review" in text
    assert "Refund of $49.99 approved" in text
    assert "Refund of $49.99 issued" in text
    assert "Our team could not approve your request." in text


def test_chat_page_says_under_review_once_while_an_approval_is_pending(signed_in, ticket):
    services.ticket_transition(ticket=ticket, to_status=TicketStatus.PENDING_APPROVAL, actor_kind=ActorKind.AGENT)
    services.event_append(ticket=ticket, kind="approval_requested", actor_kind=ActorKind.AGENT, is_public=True)

    html = signed_in.get(reverse("tickets:chat", args=[ticket.pk])).content.decode()

    assert 'id="chat-status-text">Under review by our team<' in html
    assert text_of(html.encode()).count("Your request is under review by our team.") == 1


def test_chat_page_shows_typing_while_the_agent_is_answering(signed_in, ticket):
    services.event_append(ticket=ticket, kind="agent_run_started", actor_kind=ActorKind.AGENT, is_public=True)

    html = signed_in.get(reverse("tickets:chat", args=[ticket.pk])).content.decode()

    assert 'id="chat-status-text">Our assistant is typing…<' in html


def test_chat_page_escapes_message_text(signed_in, customer):
    attack = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    ticket, _ = services.ticket_open(customer=customer, subject=attack, body=attack)

    html = signed_in.get(reverse("tickets:chat", args=[ticket.pk])).content.decode()

    assert "<img src=x" not in html and "<script>alert" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html


def test_another_customers_chat_is_404(signed_in, other_customer):
    theirs, _ = services.ticket_open(customer=other_customer, subject="Private", body="My address is secret")

    response = signed_in.get(reverse("tickets:chat", args=[theirs.pk]))

    assert response.status_code == 404
    assert "secret" not in response.content.decode()


def test_a_missing_ticket_is_404(signed_in):
    assert signed_in.get(reverse("tickets:chat", args=[987654])).status_code == 404


# --- sending ------------------------------------------------------------------------------------


def test_first_send_posts_the_message_and_rings_the_agent_once(
    signed_in, ticket, doorbells, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = send(signed_in, ticket, "  Any news?  ", client_msg_id="c-1")

    assert response.status_code == 201
    message = response.json()["message"]
    assert message["text"] == "Any news?" and message["client_msg_id"] == "c-1" and message["author"] == "customer"
    assert Message.objects.get(pk=message["id"]).author_user_id == ticket.customer.user_id
    assert doorbells == [ticket.pk]


def test_a_retried_send_returns_the_original_message_and_starts_no_second_turn(
    signed_in, ticket, doorbells, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first = send(signed_in, ticket, "Any news?", client_msg_id="c-retry")
        events_after_first = TicketEvent.objects.filter(ticket=ticket).count()
        again = send(signed_in, ticket, "Any news?", client_msg_id="c-retry")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["message"] == first.json()["message"]
    assert Message.objects.filter(ticket=ticket, client_msg_id="c-retry").count() == 1
    assert TicketEvent.objects.filter(ticket=ticket).count() == events_after_first
    assert doorbells == [ticket.pk]


def test_a_send_reads_the_ticket_once_and_its_message_id_once(signed_in, ticket):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        response = send(signed_in, ticket, "Any news?", client_msg_id="c-count")

    assert response.status_code == 201 and response.json()["message"]["attachments"] == []
    statements = [q["sql"] for q in queries.captured_queries]
    # The access check is one query (the ticket through its customer's user), the client message
    # ID is looked for once, and a message sent without files does not read its attachments.
    assert [s for s in statements if s.startswith('SELECT "tickets_customer"')] == []
    assert len([s for s in statements if s.startswith("SELECT") and "client_msg_id" in s.split("WHERE")[-1]]) == 1
    assert [s for s in statements if "tickets_attachment" in s] == []


def test_a_client_message_id_reused_for_other_text_is_a_conflict(signed_in, ticket):
    send(signed_in, ticket, "First text", client_msg_id="c-same")

    response = send(signed_in, ticket, "Other text", client_msg_id="c-same")

    assert response.status_code == 409
    assert "different message" in response.json()["error"]
    assert list(Message.objects.filter(client_msg_id="c-same").values_list("body", flat=True)) == ["First text"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("   ", "cannot be empty"),
        ("\u200b\u200d\u2060", "cannot be empty"),  # zero-width characters only: the bubble would show nothing
        ("\x07\x1b\x7f\t", "cannot be empty"),  # control characters only
        # Variation selectors (an emoji's "as a picture") and the combining grapheme joiner only: they
        # change the character before them, and alone draw nothing.
        ("\ufe0f\ufe0e", "cannot be empty"),
        ("\u034f \U000e0100", "cannot be empty"),
        ("x" * (services.MESSAGE_MAX_CHARS + 1), f"at most {services.MESSAGE_MAX_CHARS}"),
    ],
)
def test_an_empty_or_oversized_message_is_refused_with_the_reason(signed_in, ticket, body, reason):
    response = send(signed_in, ticket, body, client_msg_id="c-bad")

    assert response.status_code == 400
    assert reason in response.json()["error"]
    assert not Message.objects.filter(client_msg_id="c-bad").exists()


def test_a_message_of_exactly_the_maximum_length_is_accepted(signed_in, ticket):
    assert send(signed_in, ticket, "x" * services.MESSAGE_MAX_CHARS, client_msg_id="c-max").status_code == 201


def test_a_message_on_a_closed_ticket_is_refused(signed_in, ticket):
    services.ticket_transition(ticket=ticket, to_status=TicketStatus.CLOSED, actor_kind=ActorKind.SYSTEM)

    response = send(signed_in, ticket, "Hello?", client_msg_id="c-closed")

    # The ticket's state refuses it, not the message's words: 409, with a code a client can read.
    assert response.status_code == 409
    assert response.json() == {"error": "This ticket is closed; please open a new one.", "code": "ticket_closed"}
    assert not Message.objects.filter(client_msg_id="c-closed").exists()


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", '{"body": "no id"}', '{"client_msg_id": "c", "body": 7}'])
def test_a_malformed_send_is_refused(signed_in, ticket, raw):
    response = signed_in.post(
        reverse("tickets:message_create", args=[ticket.pk]), data=raw, content_type="application/json"
    )
    assert response.status_code == 400 and response.json()["error"]


def test_sending_to_another_customers_ticket_is_404_and_writes_nothing(signed_in, other_customer):
    theirs, _ = services.ticket_open(customer=other_customer, subject="Private", body="Hello")

    response = send(signed_in, theirs, "Let me in", client_msg_id="c-intruder")

    assert response.status_code == 404
    assert not Message.objects.filter(body="Let me in").exists()


def test_a_send_to_another_logins_ticket_says_so_as_for_a_missing_one(signed_in, other_customer):  # noqa: ANN001
    """Another customer signed in on a shared browser while a chat was open: the chat is told why, in
    JSON, and offered a sign-in back to the ticket; whether it exists, or whose it is, stays unsaid."""
    theirs, _ = services.ticket_open(customer=other_customer, subject="Private", body="Hello")
    missing = Ticket.objects.order_by("-pk").first().pk + 1000

    answers = [send(signed_in, t, "Let me in", client_msg_id="c-intruder") for t in (theirs, Ticket(pk=missing))]

    for answer, ticket_id in zip(answers, (theirs.pk, missing), strict=True):
        assert answer.status_code == 404
        assert answer.json() == {
            "error": "this conversation is not open to the account signed in on this browser now.",
            "code": "not_this_account",
            "login_url": f"/accounts/login/?next=/tickets/{ticket_id}/",
        }
    assert not Message.objects.filter(body="Let me in").exists()


def test_a_signed_out_send_is_401_with_a_sign_in_link_back_to_the_ticket_and_writes_nothing(client, ticket):
    response = send(client, ticket, "Hello", client_msg_id="c-anon")

    assert response.status_code == 401
    assert response.json() == {
        "error": "You were signed out, so this message was not sent.",
        "login_url": f"/accounts/login/?next=/tickets/{ticket.pk}/",
    }
    assert not Message.objects.filter(client_msg_id="c-anon").exists()


def test_a_signed_out_send_to_a_missing_ticket_is_told_the_same_as_to_a_real_one(client, ticket):
    missing = send(client, Ticket(pk=ticket.pk + 1000), "Hello", client_msg_id="c-anon")

    assert missing.status_code == 401
    assert missing.json()["error"] == send(client, ticket, "Hello", client_msg_id="c-anon").json()["error"]


def test_a_send_after_the_session_ended_is_401(signed_in, ticket):
    signed_in.session.flush()  # the session row is gone, as after expiry or a sign-out elsewhere

    response = send(signed_in, ticket, "Still there?", client_msg_id="c-expired")

    assert response.status_code == 401
    assert not Message.objects.filter(client_msg_id="c-expired").exists()


def test_a_send_without_the_csrf_token_is_refused(customer, ticket):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(customer.user)

    response = send(browser, ticket, "Forged", client_msg_id="c-forged")

    assert response.status_code == 403
    assert not Message.objects.filter(body="Forged").exists()


def test_a_send_with_the_csrf_token_from_the_chat_page_is_accepted(customer, ticket):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(customer.user)
    page = browser.get(reverse("tickets:chat", args=[ticket.pk])).content.decode()
    token = re.search(r'<meta name="csrf-token" content="([^"]+)"', page)[1]

    response = browser.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        data=json.dumps({"client_msg_id": "c-csrf", "body": "Real"}),
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )

    assert response.status_code == 201


def test_a_customer_other_than_the_first_can_use_their_own_chat(client):
    # Guards the door from the other side: a second customer is not shut out of their own ticket.
    second = make_customer()
    ticket, _ = services.ticket_open(customer=second, subject="Mine too", body="Hello")
    client.force_login(second.user)
    assert client.get(reverse("tickets:chat", args=[ticket.pk])).status_code == 200


# --- the words for each event (tickets.presenters) --------------------------------------------


def _event(ticket: Ticket, kind: str, *, is_public: bool = True, actor: str = ActorKind.AGENT, **payload):  # noqa: ANN003, ANN202
    return services.event_append(ticket=ticket, kind=kind, actor_kind=actor, payload=payload, is_public=is_public)


def test_an_internal_event_is_never_presented_to_the_customer(ticket):
    event = _event(ticket, "tool_call_started", is_public=False, label="Looking up your order")
    assert presenters.present_event(event) is None


def test_an_event_kind_without_customer_words_is_skipped(ticket):
    assert presenters.present_event(_event(ticket, "agent_run_recovered", text="RECOVERY NOTE")) is None
    assert presenters.present_event(_event(ticket, "tool_call_started", label="")) is None


def test_a_run_starting_turns_typing_on_and_ending_or_pausing_turns_it_off(ticket):
    assert presenters.present_event(_event(ticket, "agent_run_started"))["typing"] is True
    for kind in ("agent_run_completed", "agent_run_handed_off", "agent_run_waiting_approval"):
        assert presenters.present_event(_event(ticket, kind))["typing"] is False, kind


def test_a_person_joining_and_a_hand_off_are_told_apart(ticket):
    joined = _event(ticket, "status_changed", actor=ActorKind.STAFF, to=TicketStatus.WITH_HUMAN)
    handed = _event(ticket, "status_changed", actor=ActorKind.AGENT, to=TicketStatus.WITH_HUMAN)
    assert presenters.present_event(joined)["text"] == "A person from our team has joined the conversation."
    assert "will take it from here and reply in this chat" in presenters.present_event(handed)["text"]
    assert presenters.present_event(handed)["status"] == TicketStatus.WITH_HUMAN


def test_a_status_change_without_words_still_updates_the_status(ticket):
    item = presenters.present_event(_event(ticket, "status_changed", to=TicketStatus.WAITING_ON_CUSTOMER))
    assert item["kind"] == "state" and item["status"] == TicketStatus.WAITING_ON_CUSTOMER and "text" not in item


def test_resolution_and_refund_are_told_in_plain_words(ticket):
    resolved = presenters.present_event(_event(ticket, "status_changed", to=TicketStatus.RESOLVED))
    refund = presenters.present_event(_event(ticket, "refund_succeeded", label="Refund of $12.50 issued"))
    assert (resolved["kind"], resolved["tone"]) == ("notice", "ok") and "resolved" in resolved["text"]
    assert (refund["text"], refund["tone"]) == ("Refund of $12.50 issued", "ok")


def test_approval_events_without_a_label_get_plain_words(ticket):
    assert presenters.present_event(_event(ticket, "approval_expired"))["text"] == "The review of your request expired."
    approved = presenters.present_event(_event(ticket, "approval_decided", decision="approved"))
    assert (approved["text"], approved["tone"]) == ("Our team approved your request.", "ok")


@pytest.mark.django_db(transaction=True)
def test_opening_a_ticket_writes_it_in_one_statement_that_is_its_whole_transaction(signed_in, customer, doorbells):
    import psycopg
    from django.db import connection

    sent: list[str] = []
    exec_command = psycopg.Connection._exec_command

    def counting(conn, command, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        sent.append((command if isinstance(command, bytes) else str(command).encode()).split(b" ")[0].decode())
        return exec_command(conn, command, *args, **kwargs)

    statements: list[str] = []

    def recording(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        statements.append(sql)
        return execute(sql, params, many, context)

    form = {"subject": "", "body": "Where is my order A-1?", "client_ref": "form-one"}
    psycopg.Connection._exec_command = counting
    try:
        with connection.execute_wrapper(recording):
            response = signed_in.post(reverse("tickets:new"), form)
    finally:
        psycopg.Connection._exec_command = exec_command

    ticket = Ticket.objects.get(customer=customer)
    assert response.status_code == 302 and response.url == reverse("tickets:chat", args=[ticket.pk])
    assert (ticket.subject, ticket.status, ticket.last_event_seq) == ("Where is my order A-1?", "open", 2)
    events = list(ticket.events.order_by("seq").values_list("seq", "kind", "actor_user", "is_public"))
    assert events == [(1, "ticket_opened", customer.user.pk, True), (2, "message", customer.user.pk, True)]
    message = ticket.messages.get()
    assert (message.author_kind, message.body, message.client_msg_id) == (
        "customer", "Where is my order A-1?", "open:form-one"
    )  # fmt: skip
    assert ticket.events.get(seq=2).payload["message_id"] == message.pk
    assert doorbells == [ticket.pk]  # the agent is rung once it is committed
    # The keys are taken first, then the ticket, its message and their events are one statement,
    # sent as the whole transaction: no BEGIN, no COMMIT, no other write.
    writes = [s for s in statements if not s.startswith("SELECT")]
    assert len(writes) == 1, writes
    assert "BEGIN" not in sent and "COMMIT" not in sent, sent
    # No approval request can wait on a ticket opened just now: the dashboards are not asked about one.
    assert [s for s in statements if "approvals_approvalrequest" in s] == []
