"""A form field sent twice (``body=...&body=...``) is refused with a 400 that names it, as a JSON key
named twice is: which value counts would be the parser's choice, and the other would be lost unread.
The chat stored the last ``body`` and dropped the first, and a Confirm/Cancel answer sent as both
counted as the last one (a Confirm, and the refund paid)."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.staff.conftest import make_support_staff
from tests.tickets.files import png_bytes
from tickets import services
from tickets.models import AuthorKind, Message, Ticket, TicketRating

pytestmark = pytest.mark.django_db
FORM = "application/x-www-form-urlencoded"


@pytest.mark.parametrize(
    "body",
    [
        "client_msg_id=twice-1&body=Refund+it&body=Do+not+refund+it",
        "client_msg_id=twice-2&client_msg_id=twice-3&body=Hello",
    ],
)
@pytest.mark.parametrize("encoding", ["urlencoded", "multipart"])
def test_a_message_with_a_field_sent_twice_is_refused_and_stores_nothing(signed_in, ticket, body, encoding):  # noqa: ANN001
    before = list(Message.objects.filter(ticket=ticket).values_list("pk", flat=True))
    url = reverse("tickets:message_create", args=[ticket.pk])
    pairs = [part.split("=") for part in body.split("&")]

    if encoding == "urlencoded":
        response = signed_in.post(url, body, content_type=FORM)
    else:
        fields: dict[str, list[str]] = {}
        for name, value in pairs:
            fields.setdefault(name, []).append(value.replace("+", " "))
        response = signed_in.post(url, fields)

    assert response.status_code == 400, (response.status_code, response.content[:300])
    twice = next(name for name, _ in pairs if sum(n == name for n, _ in pairs) > 1)
    assert repr(twice) in response.json()["error"] and "twice" in response.json()["error"]
    assert list(Message.objects.filter(ticket=ticket).values_list("pk", flat=True)) == before


def test_a_new_ticket_form_with_a_field_sent_twice_opens_no_ticket(signed_in):  # noqa: ANN001
    before = Ticket.objects.count()

    response = signed_in.post(
        reverse("tickets:new"), "subject=Kettle&body=It+leaks&body=It+is+fine&client_ref=twice-form", content_type=FORM
    )

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "'body'" in response.content.decode().replace("&#x27;", "'")
    assert Ticket.objects.count() == before


def test_a_rating_with_a_score_sent_twice_rates_nothing(signed_in, ticket):  # noqa: ANN001
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="A new one is on its way.")
    services.ticket_resolve(ticket=ticket, user=make_support_staff("rita", first_name="Rita"))

    response = signed_in.post(reverse("tickets:rate", args=[ticket.pk]), "score=1&score=5&comment=", content_type=FORM)

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "'score'" in response.content.decode().replace("&#x27;", "'")
    assert not TicketRating.objects.filter(ticket=ticket).exists()


def test_several_files_under_files_are_one_field_not_a_field_sent_twice(signed_in, ticket, media):  # noqa: ANN001
    response = signed_in.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        {
            "client_msg_id": "two-photos",
            "body": "Two photos",
            "files": [SimpleUploadedFile(f"p{n}.png", png_bytes(), content_type="image/png") for n in range(2)],
        },
    )

    assert response.status_code == 201, response.content[:300]
    assert len(response.json()["message"]["attachments"]) == 2
