"""When the files of a message cannot be stored (a full disk, a volume gone, a bucket refusing), the
customer is told so in plain words with a 503 that says to send again, nothing half-written is kept,
and the same send goes through once storage is back: the message is never stored without its files
nor lost behind a bare 500."""

from __future__ import annotations

import pytest
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.conftest import stored_files
from tests.tickets.files import PDF_BYTES, png_bytes, post_with_files
from tickets import services
from tickets.models import Attachment, Message, Ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def ticket(customer) -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Broken kettle", body="It arrived cracked.")
    return ticket


def send(client, ticket: Ticket):  # noqa: ANN001, ANN201
    return client.post(
        reverse("tickets:message_create", args=[ticket.pk]),
        data={
            "client_msg_id": "with-files-1",
            "body": "The dent, and the receipt",
            "files": [
                SimpleUploadedFile("dent.png", png_bytes(), content_type="image/png"),
                SimpleUploadedFile("receipt.pdf", PDF_BYTES, content_type="application/pdf"),
            ],
        },
    )


def test_files_that_cannot_be_stored_are_a_clear_503_and_the_same_send_goes_through_later(
    client,
    customer,
    ticket,
    media,
    settings,
    tmp_path,  # noqa: ANN001
):
    client.force_login(customer.user)
    blocker = tmp_path / "a-file"
    blocker.write_text("where the folder should be\n")
    settings.MEDIA_ROOT = blocker / "media"
    before = Message.objects.count()

    refused = send(client, ticket)

    assert refused.status_code == 503, refused.content
    assert refused.json() == {
        "error": "Your files could not be stored just now, so this message was not sent. "
        "Please send it again in a minute.",
        "code": "files_not_stored",
    }
    assert refused["Retry-After"]
    assert Message.objects.count() == before
    assert not Attachment.objects.exists()

    settings.MEDIA_ROOT = media
    again = send(client, ticket)

    assert again.status_code == 201, again.content
    message = Message.objects.get(client_msg_id="with-files-1")
    assert [a.original_name for a in message.attachments.order_by("position")] == ["dent.png", "receipt.pdf"]
    assert len(stored_files(media)) == 2


def test_a_store_that_fails_partway_leaves_no_file_behind(customer, ticket, media, monkeypatch):  # noqa: ANN001
    real_save = default_storage.save
    saved: list[str] = []

    def save_once_then_fail(name, content, **kwargs):  # noqa: ANN001, ANN003, ANN202
        if saved:
            raise OSError(28, "No space left on device")
        saved.append(real_save(name, content, **kwargs))
        return saved[-1]

    monkeypatch.setattr(default_storage, "save", save_once_then_fail)

    with pytest.raises(services.FilesNotStored) as failed:
        post_with_files(ticket, [("dent.png", png_bytes()), ("receipt.pdf", PDF_BYTES)])

    assert failed.value.code == "files_not_stored"
    assert len(saved) == 1
    assert stored_files(media) == []
    assert not Message.objects.filter(client_msg_id="m-files").exists()
