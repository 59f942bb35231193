"""A message (a new ticket, a rating) sent with a field the endpoint does not read is refused with a
400 that names it, and nothing is stored. A photo sent under another name than ``files`` (``file``,
``photo``), or listed in a JSON body, was dropped without a word: the message was stored without it,
with a 201, and the customer's photo was lost."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.conftest import stored_files
from tests.staff.conftest import make_support_staff
from tests.tickets.files import png_bytes
from tickets import services
from tickets.models import Attachment, AuthorKind, Message, Ticket, TicketRating

pytestmark = pytest.mark.django_db


def stored(ticket: Ticket) -> tuple[list[int], int]:
    return list(Message.objects.filter(ticket=ticket).values_list("pk", flat=True)), Attachment.objects.count()


@pytest.mark.parametrize("field", ["file", "photo", "files[]"])
def test_a_photo_under_another_field_name_is_refused_not_dropped(signed_in, ticket, media, field):  # noqa: ANN001
    before = stored(ticket)

    response = signed_in.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        data={
            "client_msg_id": f"photo-as-{field}",
            "body": "Photo attached",
            field: SimpleUploadedFile("kettle.png", png_bytes(), content_type="image/png"),
        },
    )

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert repr(field) in response.json()["error"] and "files" in response.json()["error"]
    assert stored(ticket) == before
    assert stored_files(media) == []


def test_files_listed_in_a_json_body_are_refused_not_dropped(signed_in, ticket):  # noqa: ANN001
    before = stored(ticket)

    response = signed_in.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        json.dumps({"client_msg_id": "json-files", "body": "Photo attached", "files": ["kettle.png"]}),
        content_type="application/json",
    )

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "'files'" in response.json()["error"]
    assert stored(ticket) == before


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_a_text_field_the_endpoint_does_not_read_is_refused(signed_in, ticket, content_type):  # noqa: ANN001
    before = stored(ticket)
    fields = {"client_msg_id": "extra-field", "body": "My kettle", "subject": "Kettle"}
    url = reverse("tickets:message_create", args=[ticket.pk])
    if content_type == "application/json":
        response = signed_in.post(url, json.dumps(fields), content_type=content_type)
    elif content_type == "multipart/form-data":
        response = signed_in.post(url, fields)
    else:
        response = signed_in.post(url, "&".join(f"{k}={v}" for k, v in fields.items()), content_type=content_type)

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "'subject'" in response.json()["error"]
    assert stored(ticket) == before


def test_the_fields_the_chat_sends_are_read(signed_in, ticket, media):  # noqa: ANN001
    url = reverse("tickets:message_create", args=[ticket.pk])

    hello = json.dumps({"client_msg_id": "j-1", "body": "Hello"})
    as_json = signed_in.post(url, hello, content_type="application/json")
    as_form = signed_in.post(
        url,
        {
            "client_msg_id": "f-1",
            "body": "",
            "files": [SimpleUploadedFile("kettle.png", png_bytes(), content_type="image/png")],
            "csrfmiddlewaretoken": "sent by a plain form",
        },
    )

    assert (as_json.status_code, as_form.status_code) == (201, 201), (as_json.content[:200], as_form.content[:200])
    assert Attachment.objects.filter(message__client_msg_id="f-1").count() == 1


@pytest.mark.parametrize("extra", ["photo", "order_number"])
def test_a_new_ticket_form_with_a_field_it_does_not_read_opens_no_ticket(signed_in, media, extra):  # noqa: ANN001
    before = Ticket.objects.count()
    sent = SimpleUploadedFile("kettle.png", png_bytes(), content_type="image/png") if extra == "photo" else "A-1002"

    response = signed_in.post(
        reverse("tickets:new"), {"subject": "Kettle", "body": "It arrived cracked", "client_ref": "new-1", extra: sent}
    )

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert repr(extra) in response.content.decode().replace("&#x27;", "'")
    assert Ticket.objects.count() == before
    assert stored_files(media) == []


def test_a_rating_with_a_field_the_form_does_not_read_rates_nothing(signed_in, ticket):  # noqa: ANN001
    services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body="A new one is on its way.")
    services.ticket_resolve(ticket=ticket, user=make_support_staff("rita", first_name="Rita"))

    response = signed_in.post(
        reverse("tickets:rate", args=[ticket.pk]), {"score": "2", "comments": "The new one is cracked too"}
    )

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "'comments'" in response.content.decode().replace("&#x27;", "'")
    assert not TicketRating.objects.filter(ticket=ticket).exists()
