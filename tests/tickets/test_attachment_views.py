"""Sending files over HTTP, and who may open them (the customer's own, staff; nobody else)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer, stored_files
from tests.staff.conftest import make_support_staff
from tests.tickets.files import PDF_BYTES, png_bytes, post_with_files
from tickets import services
from tickets.attachments import size_words
from tickets.models import Attachment, Message, Ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def ticket(customer) -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Broken kettle", body="It arrived cracked.")
    return ticket


@pytest.fixture
def signed_in(client, customer) -> Client:  # noqa: ANN001
    client.force_login(customer.user)
    return client


def upload(client: Client, ticket: Ticket, files: list[tuple[str, bytes, str]], body: str = "Photo attached"):  # noqa: ANN201
    return client.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        data={
            "client_msg_id": "up-1",
            "body": body,
            "files": [SimpleUploadedFile(name, data, content_type=claimed) for name, data, claimed in files],
        },
    )


def test_a_customer_sends_a_photo_with_a_message(signed_in, ticket, media):  # noqa: ANN001
    response = upload(signed_in, ticket, [("kettle.png", png_bytes(), "image/png")])

    assert response.status_code == 201
    sent = response.json()["message"]
    attachment = Attachment.objects.get(message_id=sent["id"])
    assert sent["text"] == "Photo attached"
    assert sent["attachments"] == [
        {
            "id": attachment.pk,
            "name": "kettle.png",
            "type": "image/png",
            "size": attachment.size,
            "size_text": size_words(attachment.size),
            "url": f"/attachments/{attachment.pk}/",
            "image": True,
        }
    ]


def test_a_retried_upload_answers_with_the_original_and_stores_nothing_more(signed_in, ticket, media):  # noqa: ANN001
    first = upload(signed_in, ticket, [("kettle.png", png_bytes(), "image/png")])
    again = upload(signed_in, ticket, [("kettle.png", png_bytes(), "image/png")])

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["message"]["id"] == first.json()["message"]["id"]
    assert Attachment.objects.count() == 1 and len(stored_files(media)) == 1


def test_a_file_of_a_forbidden_type_is_refused_with_what_is_accepted(signed_in, ticket, media):  # noqa: ANN001
    before = Message.objects.count()

    response = upload(signed_in, ticket, [("notes.png", b"only text in here\n", "image/png")])

    assert response.status_code == 400
    assert (
        response.json()["error"]
        == "notes.png is not a file we accept. Please send a photo (JPEG, PNG or WebP) or a PDF."
    )
    assert Message.objects.count() == before
    assert stored_files(media) == []


def test_a_file_over_the_limit_is_refused_with_413_before_it_is_read(signed_in, ticket, media, settings):  # noqa: ANN001
    settings.ATTACHMENT_MAX_BYTES = 1024

    response = upload(signed_in, ticket, [("scan.pdf", PDF_BYTES + b"0" * (3000 - len(PDF_BYTES)), "application/pdf")])

    assert response.status_code == 413
    assert response.json()["error"] == "scan.pdf is 3 KB; a file can be at most 1 KB."
    assert not Attachment.objects.exists()


def test_a_refusal_of_one_file_says_which_by_its_place_among_those_sent(signed_in, ticket, media, settings):  # noqa: ANN001
    """Named alike (a phone calls every photo "image.jpg"), the chat could not tell which to drop."""
    settings.ATTACHMENT_MAX_BYTES = 1024
    good = ("image.jpg", png_bytes(), "image/jpeg")

    damaged = upload(signed_in, ticket, [good, good, ("image.jpg", b"only text in here\n", "image/jpeg")])
    too_large = upload(signed_in, ticket, [good, ("image.jpg", PDF_BYTES + b"0" * 3000, "application/pdf"), good])
    too_many = upload(signed_in, ticket, [good] * 6)

    assert (damaged.status_code, damaged.json()["file_index"]) == (400, 2)
    assert (too_large.status_code, too_large.json()["file_index"]) == (413, 1)
    assert too_many.status_code == 400 and "file_index" not in too_many.json()  # about no one file
    assert not Message.objects.filter(client_msg_id="up-1").exists()


def test_a_customer_cannot_attach_to_another_customers_ticket(client, ticket, media):  # noqa: ANN001
    client.force_login(make_customer().user)

    response = upload(client, ticket, [("kettle.png", png_bytes(), "image/png")])

    assert response.status_code == 404
    assert not Attachment.objects.exists()


# --- opening a file ---------------------------------------------------------------------------


@pytest.fixture
def photo(ticket, media) -> Attachment:  # noqa: ANN001
    message, _ = post_with_files(ticket, [("kettle.png", png_bytes())])
    return message.attachments.get()


def test_the_customer_opens_their_own_photo_inline(signed_in, photo, media):  # noqa: ANN001
    response = signed_in.get(f"/attachments/{photo.pk}/")

    assert response.status_code == 200
    assert b"".join(response.streaming_content) == (media / photo.storage_name).read_bytes()
    assert response["Content-Type"] == "image/png"
    assert response["Content-Disposition"] == 'inline; filename="kettle.png"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response["Content-Security-Policy"]
    assert response["Cache-Control"] == "private, max-age=3600"


def test_a_pdf_downloads_under_a_safe_name_and_never_runs_in_the_page(signed_in, ticket, media):  # noqa: ANN001
    message, _ = post_with_files(ticket, [('in"voice.pdf', PDF_BYTES)])

    response = signed_in.get(f"/attachments/{message.attachments.get().pk}/")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/pdf"
    assert response["Content-Disposition"].startswith("attachment; filename=")
    assert '"in\\"voice.pdf"' in response["Content-Disposition"]
    assert "sandbox" in response["Content-Security-Policy"]


def test_a_png_sent_as_a_pdf_is_served_as_a_png(signed_in, ticket, media):  # noqa: ANN001
    message, _ = post_with_files(ticket, [("receipt.pdf", png_bytes())])

    response = signed_in.get(f"/attachments/{message.attachments.get().pk}/")

    assert response["Content-Type"] == "image/png"
    assert response["Content-Disposition"] == 'inline; filename="receipt.png"'


def test_another_customer_gets_404_for_a_file_that_is_not_theirs(client, photo):  # noqa: ANN001
    client.force_login(make_customer().user)

    assert client.get(f"/attachments/{photo.pk}/").status_code == 404
    assert client.get(f"/attachments/{photo.pk + 1000}/").status_code == 404  # the same as a missing one


def test_an_anonymous_visitor_is_sent_to_sign_in(client, photo):  # noqa: ANN001
    response = client.get(f"/attachments/{photo.pk}/")

    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next=/attachments/{photo.pk}/"


def test_support_staff_open_any_customers_file(client, photo):  # noqa: ANN001
    client.force_login(make_support_staff("maria"))

    assert client.get(f"/attachments/{photo.pk}/").status_code == 200


def test_an_approver_opens_the_files_on_the_approval_card(client, photo, django_user_model):  # noqa: ANN001
    approver = django_user_model.objects.create_user(username="ann", password="pw-for-tests-123", is_staff=True)
    approver.user_permissions.add(Permission.objects.get(codename="decide_approval"))

    client.force_login(django_user_model.objects.get(pk=approver.pk))

    assert client.get(f"/attachments/{photo.pk}/").status_code == 200


def test_staff_without_a_support_permission_get_404(client, photo, django_user_model):  # noqa: ANN001
    client.force_login(django_user_model.objects.create_user(username="temp", password="pw-123-x", is_staff=True))

    assert client.get(f"/attachments/{photo.pk}/").status_code == 404


def test_a_file_missing_from_storage_is_404_not_an_error(signed_in, photo, media):  # noqa: ANN001
    (media / photo.storage_name).unlink()

    assert signed_in.get(f"/attachments/{photo.pk}/").status_code == 404


def test_a_file_the_storage_cannot_read_just_now_is_a_503_that_says_so(signed_in, photo, media):  # noqa: ANN001
    # Something the storage cannot open as a file (a volume gone bad, a bucket refusing): here, a folder.
    stored = media / photo.storage_name
    stored.unlink()
    stored.mkdir()

    response = signed_in.get(f"/attachments/{photo.pk}/")

    assert response.status_code == 503
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == "This file cannot be opened just now. Please try again in a minute."
    assert response["Retry-After"]


# --- where the files show -----------------------------------------------------------------------


def test_the_chat_page_shows_a_thumbnail_of_the_photo(signed_in, ticket, photo):  # noqa: ANN001
    page = signed_in.get(reverse("tickets:chat", args=[ticket.pk])).content.decode()

    assert f'<img src="/attachments/{photo.pk}/" alt="kettle.png"' in page
    assert 'type="file" id="chat-files"' in page and 'accept="image/jpeg,image/png,image/webp,application/pdf"' in page


def test_the_staff_conversation_shows_the_photo(client, ticket, photo):  # noqa: ANN001
    client.force_login(make_support_staff("maria"))

    page = client.get(reverse("staff:ticket", args=[ticket.pk])).content.decode()

    assert f'<img src="/attachments/{photo.pk}/" alt="kettle.png"' in page


def test_more_files_than_the_server_parses_are_refused_with_the_limit_not_an_error_page(signed_in, ticket, media):  # noqa: ANN001
    """Past Django's own cap on files in one request (100), the send got an HTML "Bad Request (400)"
    with no reason, which the chat (asking for JSON) cannot show."""
    response = signed_in.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        data={
            "client_msg_id": "up-1",
            "body": "Photos",
            "files": [SimpleUploadedFile(f"p{i}.png", b"x", content_type="image/png") for i in range(120)],
        },
        HTTP_ACCEPT="application/json",
    )

    assert response.status_code == 400
    assert response.json()["error"] == "Too many files in one request; nothing was saved."
    assert not Message.objects.filter(client_msg_id="up-1").exists() and not Attachment.objects.exists()
