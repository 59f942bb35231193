"""The customer rates a resolved ticket: 1 to 5 and a comment, on the timeline, seen by staff."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import presenters, services
from tickets.models import AuthorKind, Customer, Ticket, TicketEvent, TicketRating, TicketStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def person(db):  # noqa: ANN001
    return make_support_staff("rita", first_name="Rita", last_name="Ray")


@pytest.fixture
def signed_in(client, customer) -> Client:  # noqa: ANN001
    client.force_login(customer.user)
    return client


@pytest.fixture
def resolved(customer: Customer, person) -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="It ships today.")
    return services.ticket_resolve(ticket=ticket, user=person)


def rate(client: Client, ticket: Ticket, score: object = "4", comment: str = "Quick and kind"):  # noqa: ANN201
    return client.post(reverse("tickets:rate", args=[ticket.pk]), {"score": score, "comment": comment})


def text_of(response) -> str:  # noqa: ANN001
    return html.unescape(" ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split()))


def rating_form_shown(client: Client, ticket: Ticket) -> bool:
    page = client.get(reverse("tickets:chat", args=[ticket.pk])).content.decode()
    tag = re.search(r'<section class="chat-rating" id="chat-rating"[^>]*>', page)[0]
    return " hidden" not in tag


def test_a_customer_rates_a_resolved_ticket_and_it_is_on_the_timeline_for_them_and_staff(signed_in, resolved, person):  # noqa: ANN001
    assert rating_form_shown(signed_in, resolved)

    response = rate(signed_in, resolved, "4", "Quick and kind")

    assert response.status_code == 302 and response["Location"].endswith(f"/tickets/{resolved.pk}/#chat-rating")
    rating = TicketRating.objects.get(ticket=resolved)
    assert (rating.score, rating.comment) == (4, "Quick and kind")
    event = TicketEvent.objects.get(ticket=resolved, kind="rated")
    assert event.is_public and event.actor_user == resolved.customer.user
    assert event.payload == {"score": 4, "comment": "Quick and kind", "previous_score": None}
    assert presenters.present_event(event)["text"] == "Thanks for your rating."
    chat = text_of(signed_in.get(reverse("tickets:chat", args=[resolved.pk])))
    assert "Thanks for your rating." in chat and "You rated this conversation 4 out of 5" in chat

    staff = Client()
    staff.force_login(person)
    page = text_of(staff.get(reverse("staff:ticket", args=[resolved.pk])))
    assert "Customer rating 4 out of 5" in page and "“Quick and kind”" in page  # beside the conversation
    assert "rated the help they got (1 to 5). 4 out of 5: “Quick and kind”" in page, page  # on the timeline
    side = staff.get(reverse("staff:timeline", args=[resolved.pk]) + "?after=0").json()["side_html"]
    assert "4 out of 5" in side  # refreshed live with the customer's orders
    inbox = staff.get(reverse("staff:inbox") + "?view=rated").content.decode()
    assert f'data-ticket-id="{resolved.pk}"' in inbox and "<strong>4/5</strong>" in inbox
    assert "Quick and kind" in inbox


def test_another_customer_cannot_rate_the_ticket(resolved):
    stranger = Client()
    stranger.force_login(make_customer().user)

    response = rate(stranger, resolved)

    assert response.status_code == 404
    assert not TicketRating.objects.exists() and not TicketEvent.objects.filter(kind="rated").exists()


def test_an_anonymous_visitor_cannot_rate(client, resolved):  # noqa: ANN001
    # Sent to sign in, before the ticket is looked up: whether it exists is nobody's business yet.
    response = rate(client, resolved)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    missing = rate(client, Ticket(pk=resolved.pk + 1000))
    assert missing.status_code == 302 and missing["Location"].startswith(reverse("login"))
    assert not TicketRating.objects.exists()


@pytest.mark.parametrize(
    "status", [TicketStatus.OPEN, TicketStatus.WAITING_ON_CUSTOMER, TicketStatus.WITH_HUMAN, TicketStatus.CLOSED]
)
def test_a_ticket_that_was_not_resolved_cannot_be_rated(signed_in, customer, person, status):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Kettle", body="Where is my kettle?")
    if status == TicketStatus.CLOSED:
        services.ticket_close(ticket=ticket, user=person)
    elif status == TicketStatus.WITH_HUMAN:
        services.ticket_take_over(ticket=ticket, user=person)
    else:
        services.ticket_transition(ticket=ticket, to_status=status, actor_kind="system")
    assert not rating_form_shown(signed_in, ticket)

    response = rate(signed_in, ticket)

    assert response.status_code == 409
    assert "You can rate a conversation once it is resolved." in text_of(response)
    assert not TicketRating.objects.exists() and not TicketEvent.objects.filter(kind="rated").exists()


def test_a_ticket_closed_after_it_was_resolved_can_still_be_rated(signed_in, resolved, person):  # noqa: ANN001
    services.ticket_close(ticket=resolved, user=person)
    assert rating_form_shown(signed_in, resolved)

    assert rate(signed_in, resolved, "5").status_code == 302
    assert TicketRating.objects.get(ticket=resolved).score == 5


def test_a_double_submit_records_one_rating_and_a_change_is_recorded_as_a_change(signed_in, resolved, person):  # noqa: ANN001
    assert rate(signed_in, resolved, "2", "Slow").status_code == 302
    assert rate(signed_in, resolved, "2", "Slow").status_code == 302  # the same form again: nothing new

    assert TicketRating.objects.count() == 1
    assert TicketEvent.objects.filter(ticket=resolved, kind="rated").count() == 1

    assert rate(signed_in, resolved, "4", "Slow, but they sorted it").status_code == 302

    rating = TicketRating.objects.get(ticket=resolved)
    assert (rating.score, rating.comment) == (4, "Slow, but they sorted it")
    changes = list(TicketEvent.objects.filter(ticket=resolved, kind="rated").order_by("seq"))
    assert [e.payload["previous_score"] for e in changes] == [None, 2]
    assert presenters.present_event(changes[-1])["text"] == "Thanks, your rating was updated."
    staff = Client()
    staff.force_login(person)
    assert "4 out of 5 (was 2)" in text_of(staff.get(reverse("staff:ticket", args=[resolved.pk])))


@pytest.mark.parametrize(
    ("score", "comment", "reason"),
    [
        ("", "", "Choose a rating from 1 to 5."),
        ("0", "", "Choose a rating from 1 to 5."),
        ("6", "", "Choose a rating from 1 to 5."),
        ("great", "", "Choose a rating from 1 to 5."),
        ("5", "x" * 1001, "A comment can be at most 1000 characters; this one has 1001."),
        ("5", "bad\x00byte", "contains a NUL character"),
    ],
)
def test_a_bad_rating_is_refused_with_the_reason_and_what_was_typed_kept(signed_in, resolved, score, comment, reason):  # noqa: ANN001
    response = rate(signed_in, resolved, score, comment)

    assert response.status_code == 400
    assert reason in text_of(response)
    assert not TicketRating.objects.exists() and not TicketEvent.objects.filter(kind="rated").exists()
    if comment and "\x00" not in comment:
        assert comment in response.content.decode()


def test_a_rating_without_the_csrf_token_is_refused(customer, resolved):  # noqa: ANN001
    client = Client(enforce_csrf_checks=True)
    client.force_login(customer.user)

    assert rate(client, resolved).status_code == 403
    assert not TicketRating.objects.exists()


def test_a_rating_with_the_chat_pages_csrf_token_is_accepted(customer, resolved):  # noqa: ANN001
    client = Client(enforce_csrf_checks=True)
    client.force_login(customer.user)
    page = client.get(reverse("tickets:chat", args=[resolved.pk])).content.decode()
    token = re.search(r'id="chat-rating".*?name="csrfmiddlewaretoken" value="([^"]+)"', page, re.S)[1]

    response = client.post(reverse("tickets:rate", args=[resolved.pk]), {"score": "5", "csrfmiddlewaretoken": token})

    assert response.status_code == 302 and TicketRating.objects.get(ticket=resolved).score == 5


def test_writing_again_reopens_the_ticket_hides_the_form_and_keeps_the_rating(signed_in, customer, resolved):  # noqa: ANN001
    rate(signed_in, resolved, "3")

    services.message_post(ticket=resolved, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="One more")

    assert Ticket.objects.get(pk=resolved.pk).status == TicketStatus.OPEN
    assert not rating_form_shown(signed_in, resolved)
    assert rate(signed_in, resolved, "5").status_code == 409
    assert TicketRating.objects.get(ticket=resolved).score == 3


def test_a_comment_at_the_limit_with_line_breaks_sent_as_crlf_is_taken(signed_in, resolved):  # noqa: ANN001
    """The form posts the comment's line breaks as CRLF; the box counted each as one character, the
    server two: a comment the box took whole was refused as too long."""
    from tickets.models import RATING_COMMENT_MAX_CHARS

    as_typed = "\n".join(["z" * 19] * 50)[: RATING_COMMENT_MAX_CHARS - 1] + "w"
    assert len(as_typed) == RATING_COMMENT_MAX_CHARS and "\n" in as_typed

    response = rate(signed_in, resolved, "5", as_typed.replace("\n", "\r\n"))

    assert response.status_code in {200, 302}, text_of(response)
    assert TicketRating.objects.get(ticket=resolved).comment == as_typed


def test_a_rating_sent_after_the_session_ended_leads_to_sign_in_and_back_to_the_chat(customer, resolved):  # noqa: ANN001
    """It was a 404 ("not found") for the customer's own ticket, and the rating was lost without a word."""
    browser = Client()  # the session ended while the chat was open

    sent = rate(browser, resolved, "5", "Lovely")

    assert sent.status_code == 302 and sent["Location"].startswith(reverse("login"))
    signed_in = browser.post(sent["Location"], {"username": customer.user.username, "password": "pw-for-tests-123"})
    landed = browser.get(signed_in["Location"])
    assert landed.request["PATH_INFO"] == reverse("tickets:chat", args=[resolved.pk])
    assert "what you sent was not done" in text_of(landed)
    assert not TicketRating.objects.filter(ticket=resolved).exists()
