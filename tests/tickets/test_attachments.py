"""Customers' files: what is accepted (judged by the bytes), what is stored, and a retried send."""

from __future__ import annotations

import io

import pytest
from django.core.exceptions import ValidationError
from PIL import Image

from tests.conftest import stored_files
from tests.tickets.files import GPS_MARKER, PDF_BYTES, jpeg_with_location, png_bytes, post_with_files
from tickets import presenters, services
from tickets.attachments import AttachmentRefused, clean_name
from tickets.models import Attachment, Message, Ticket, TicketEvent, TicketStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def ticket(customer) -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject="Broken kettle", body="It arrived cracked.")
    return ticket


def test_a_png_named_pdf_is_stored_as_the_png_it_is(ticket, media):  # noqa: ANN001
    message, created = post_with_files(ticket, [("receipt.pdf", png_bytes())])

    attachment = Attachment.objects.get(message=message)
    assert created
    assert (attachment.original_name, attachment.content_type) == ("receipt.pdf", "image/png")
    assert attachment.storage_name.endswith(".png")
    stored = media / attachment.storage_name
    assert stored.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert attachment.size == stored.stat().st_size
    assert Image.open(stored).size == (32, 24)


def test_a_pdf_is_accepted_as_a_pdf(ticket, media):  # noqa: ANN001
    message, _ = post_with_files(ticket, [("invoice.pdf", PDF_BYTES)])

    attachment = message.attachments.get()
    assert attachment.content_type == "application/pdf"
    assert (media / attachment.storage_name).read_bytes() == PDF_BYTES


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("photo.jpg", b"<!DOCTYPE html><html><script>alert(1)</script></html>"),
        ("photo.jpg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'),
        ("photo.jpg", b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff" + b"\x00" * 64),
        ("notes.png", b"Just some text pretending to be a picture.\n"),
        ("anim.gif", b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,"),
    ],
    ids=["html-named-jpg", "svg-named-jpg", "exe-named-jpg", "text-named-png", "gif"],
)
def test_anything_but_an_accepted_image_or_a_pdf_is_refused_and_nothing_is_stored(ticket, media, name, data):  # noqa: ANN001
    before = Message.objects.count()

    with pytest.raises(AttachmentRefused) as refused:
        post_with_files(ticket, [(name, data)])

    assert refused.value.code == "unsupported_type"
    assert refused.value.messages == [
        f"{name} is not a file we accept. Please send a photo (JPEG, PNG or WebP) or a PDF."
    ]
    assert Message.objects.count() == before
    assert not Attachment.objects.exists()
    assert stored_files(media) == []


def test_a_file_over_the_size_limit_is_refused_with_the_limit(ticket, media, settings):  # noqa: ANN001
    settings.ATTACHMENT_MAX_BYTES = 2048

    with pytest.raises(AttachmentRefused) as refused:
        post_with_files(ticket, [("big.pdf", PDF_BYTES + b"0" * (4096 - len(PDF_BYTES)))])

    assert refused.value.code == "too_large"
    assert refused.value.messages == ["big.pdf is 4 KB; a file can be at most 2 KB."]
    assert not Attachment.objects.exists()


def test_an_image_with_too_many_pixels_is_refused_before_it_is_decoded(ticket, media, settings):  # noqa: ANN001
    settings.ATTACHMENT_MAX_PIXELS = 1_000_000
    huge = png_bytes(2000, 1000)  # tiny as a file (one colour), 2 million pixels

    with pytest.raises(AttachmentRefused) as refused:
        post_with_files(ticket, [("wall.png", huge)])

    assert refused.value.code == "too_many_pixels"
    assert "2000×1000 pixels" in refused.value.messages[0]


def test_a_damaged_image_is_refused_as_damaged(ticket, media):  # noqa: ANN001
    with pytest.raises(AttachmentRefused) as refused:
        post_with_files(ticket, [("cut.png", png_bytes(200, 200)[:60])])

    assert refused.value.code == "damaged"


def test_more_files_than_allowed_on_one_message_are_refused(ticket, media, settings):  # noqa: ANN001
    settings.ATTACHMENT_MAX_FILES = 2

    with pytest.raises(AttachmentRefused) as refused:
        post_with_files(ticket, [(f"{n}.png", png_bytes()) for n in range(3)])

    assert refused.value.messages == ["You can attach at most 2 files to one message."]
    assert stored_files(media) == []


def test_a_photo_loses_its_location_and_camera_but_stays_upright(ticket, media):  # noqa: ANN001
    original = jpeg_with_location(40, 30)
    assert GPS_MARKER.encode() in original and b"PhoneMaker" in original  # the test photo carries them

    message, _ = post_with_files(ticket, [("kettle.jpg", original)])

    stored = (media / message.attachments.get().storage_name).read_bytes()
    assert GPS_MARKER.encode() not in stored
    assert b"PhoneMaker" not in stored
    image = Image.open(io.BytesIO(stored))
    assert image.format == "JPEG"
    assert dict(image.getexif()) == {}
    assert "xmp" not in image.info and "comment" not in image.info
    assert image.size == (30, 40)  # orientation 6 applied: turned a quarter


def test_a_retried_send_stores_one_message_and_one_set_of_files(ticket, media):  # noqa: ANN001
    first, created = post_with_files(ticket, [("kettle.png", png_bytes())], client_msg_id="retry-1")
    again, created_again = post_with_files(ticket, [("kettle.png", png_bytes())], client_msg_id="retry-1")

    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert Message.objects.filter(ticket=ticket, client_msg_id="retry-1").count() == 1
    assert Attachment.objects.filter(message__ticket=ticket).count() == 1
    assert len(stored_files(media)) == 1
    assert TicketEvent.objects.filter(ticket=ticket, kind="message", payload__message_id=first.pk).count() == 1


def test_the_same_client_message_id_with_other_files_is_a_conflict(ticket, media):  # noqa: ANN001
    post_with_files(ticket, [("a.png", png_bytes())], client_msg_id="retry-2")

    with pytest.raises(services.MessageConflict):
        post_with_files(ticket, [("a.png", png_bytes(colour=(0, 0, 0)))], client_msg_id="retry-2")
    with pytest.raises(services.MessageConflict):
        post_with_files(ticket, [], client_msg_id="retry-2")

    assert Attachment.objects.count() == 1
    assert len(stored_files(media)) == 1


def test_a_message_of_files_only_reads_as_their_names(ticket, media):  # noqa: ANN001
    message, _ = post_with_files(ticket, [("front.png", png_bytes()), ("back.png", png_bytes())], body="  ")

    assert message.body == "front.png, back.png"
    assert [a.original_name for a in message.attachments.order_by("position")] == ["front.png", "back.png"]


def test_a_message_without_text_or_files_is_still_refused(ticket, media):  # noqa: ANN001
    with pytest.raises(ValidationError):
        post_with_files(ticket, [], body=" ")


def test_files_sent_to_a_closed_ticket_are_not_kept(ticket, media, staff_user):  # noqa: ANN001
    services.ticket_close(ticket=ticket, user=staff_user)

    with pytest.raises(ValidationError):
        post_with_files(ticket, [("kettle.png", png_bytes())])

    assert not Attachment.objects.exists()
    assert stored_files(media) == []  # stored inside the transaction, removed when it rolled back
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CLOSED


def test_the_timeline_lists_the_files_and_the_chat_links_to_them(ticket, media):  # noqa: ANN001
    message, _ = post_with_files(ticket, [("kettle.png", png_bytes()), ("invoice.pdf", PDF_BYTES)])
    attachments = list(message.attachments.order_by("position"))
    event = TicketEvent.objects.get(ticket=ticket, kind="message", payload__message_id=message.pk)

    assert event.payload["attachments"] == [
        {"id": a.pk, "name": a.original_name, "type": a.content_type, "size": a.size} for a in attachments
    ]
    item = presenters.present_event(event)
    assert [(f["name"], f["image"], f["url"]) for f in item["attachments"]] == [
        ("kettle.png", True, f"/attachments/{attachments[0].pk}/"),
        ("invoice.pdf", False, f"/attachments/{attachments[1].pk}/"),
    ]


@pytest.mark.parametrize(
    ("given", "cleaned"),
    [
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\photo.jpg", "photo.jpg"),
        ("bad\x00name\x1b.png", "badname.png"),
        ("   ", "attachment"),
        ("a" * 300 + ".jpeg", "a" * 195 + ".jpeg"),
        # Bidi controls would make staff read another name (and turn the text after it, "PDF, 3 KB",
        # around): "invoice\u202efdp.exe" shows as "invoiceexe.pdf". Right-to-left names need none.
        ("invoice\u202efdp.exe", "invoicefdp.exe"),
        ("\u2067\u05e7\u05d1\u05dc\u05d4\u2069\u200f.pdf", "\u05e7\u05d1\u05dc\u05d4.pdf"),
        ("\u202d\u202a\u202b\u202c\u2066\u2068\u200e\u061c", "attachment"),
    ],
)
def test_a_files_name_is_only_a_name(given, cleaned):  # noqa: ANN001
    assert clean_name(given) == cleaned


@pytest.fixture
def staff_user(django_user_model):  # noqa: ANN001
    return django_user_model.objects.create_user(username="sam", password="pw-for-tests-123", is_staff=True)
